"""What JetStream traffic may cross a leaf link, from the two sides' domains (pure).

The reference's rules (leafnode.go, jetstream_api.go; federation-wire.md §1.5), for a link bound
to an ordinary (non-system) account -- leafjet has no system account, so that is every link:
- ``$JS.API.>``, ``$KV.>`` and ``$OBJ.>`` never cross, either way: each side's clients reach
  their own JetStream through the bare API, and another domain's only through its prefix;
- a side never sends ``$JS.<its own domain>.API.>`` to the peer: a request for its own domain
  is answered locally, and two servers wrongly configured with one domain cannot answer each
  other's requests twice;
- ``$JS.<domain>.API.>`` of any other domain crosses freely, so a request reaches the domain
  that owns it through any number of hops.
"""

from __future__ import annotations

from dataclasses import dataclass

DENY_ALL_CLIENT_JS = ("$JS.API.>", "$KV.>", "$OBJ.>")


@dataclass(frozen=True, slots=True)
class LinkDenies:
    """Subjects this side must not send to the peer (``exports``) or take from it (``imports``)."""

    imports: tuple[str, ...]
    exports: tuple[str, ...]


def link_denies(local_domain: str | None) -> LinkDenies:
    own = (f"$JS.{local_domain}.API.>",) if local_domain else ()
    return LinkDenies(imports=DENY_ALL_CLIENT_JS, exports=DENY_ALL_CLIENT_JS + own)


def describe(local_domain: str | None, remote_domain: str | None) -> str:
    """The reference's log line, so an operator who knows it finds it here too."""
    return f'JetStream using domains: local "{local_domain or ""}", remote "{remote_domain or ""}"'
