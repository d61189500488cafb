"""The JetStream API error table carries the reference's wire values.

The expected codes below were read from nats-server ``server/errors.json``; they are the contract
clients match on, so they are hard-coded here rather than derived from the table under test.
"""

from __future__ import annotations

import pytest

from core.api_errors import API_ERRORS, ApiError, ApiErrorSpec, api_error, spec, spec_by_err_code
from core.errors import LeafjetError

EXPECTED = [
    ("JSStreamNotFoundErr", 404, 10059, "stream not found"),
    ("JSStreamNameExistErr", 400, 10058, "stream name already in use with a different configuration"),
    ("JSStreamSubjectOverlapErr", 400, 10065, "subjects overlap with an existing stream"),
    ("JSStreamInvalidConfigF", 500, 10052, "{err}"),
    ("JSStreamReplicasNotSupportedErr", 500, 10074, "replicas > 1 not supported in non-clustered mode"),
    ("JSInvalidJSONErr", 400, 10025, "invalid JSON: {err}"),
    ("JSStreamMismatchErr", 400, 10056, "stream name in subject does not match request"),
    ("JSConsumerNotFoundErr", 404, 10014, "consumer not found"),
    ("JSNoMessageFoundErr", 404, 10037, "no message found"),
    ("JSStreamWrongLastSequenceErrF", 400, 10071, "wrong last sequence: {seq}"),
    ("JSStreamWrongLastMsgIDErrF", 400, 10070, "wrong last msg ID: {id}"),
    ("JSStreamNotMatchErr", 400, 10060, "expected stream does not match"),
    ("JSStreamMessageExceedsMaximumErr", 400, 10054, "message size exceeds maximum allowed"),
    ("JSStreamSealedErr", 400, 10109, "invalid operation on sealed stream"),
    ("JSConsumerInvalidPolicyErrF", 400, 10094, "{err}"),
    ("JSConsumerDeliverToWildcardsErr", 400, 10079, "consumer deliver subject has wildcards"),
    ("JSNotEnabledErr", 503, 10076, "JetStream not enabled"),
    ("JSPedanticErrF", 400, 10157, "pedantic mode: {err}"),
    ("JSReplicasCountCannotBeNegative", 400, 10133, "replicas count cannot be negative"),
    ("JSStreamDuplicateMessageConflict", 409, 10158, "duplicate message id is in process"),
    ("JSRequiredApiLevelErr", 412, 10185, "JetStream minimum api level required"),
]


@pytest.mark.parametrize(("name", "code", "err_code", "description"), EXPECTED)
def test_table_holds_the_reference_values(name, code, err_code, description):
    assert spec(name) == ApiErrorSpec(name, code, err_code, description)
    assert spec_by_err_code(err_code).name == name


def test_err_codes_are_unique_and_templates_are_left_out():
    assert len({s.err_code for s in API_ERRORS.values()}) == len(API_ERRORS)
    assert not [n for n in API_ERRORS if "Template" in n]
    assert len(API_ERRORS) > 200


def test_unknown_name_is_a_key_error():
    with pytest.raises(KeyError):
        api_error("JSNoSuchThing")
    with pytest.raises(KeyError):
        spec_by_err_code(1)


def test_placeholders_are_filled_in():
    assert api_error("JSStreamWrongLastSequenceErrF", seq=5).description == "wrong last sequence: 5"
    err = api_error("JSRestoreSubscribeFailedErrF", subject="a.b", err=ValueError("boom"))
    assert err.description == "JetStream unable to subscribe to restore snapshot a.b: boom"


def test_a_placeholder_not_given_stays_literal():
    assert api_error("JSStreamWrongLastSequenceErrF").description == "wrong last sequence: {seq}"


def test_to_json_has_exactly_code_err_code_description():
    err = api_error("JSInvalidJSONErr", err='json: unknown field "foo"')
    assert err.to_json() == {
        "code": 400,
        "err_code": 10025,
        "description": 'invalid JSON: json: unknown field "foo"',
    }
    assert list(err.to_json()) == ["code", "err_code", "description"]


def test_api_error_is_a_leafjet_error_and_reads_like_the_reference():
    err = api_error("JSStreamNotFoundErr")
    assert isinstance(err, ApiError)
    assert isinstance(err, LeafjetError)
    assert (err.name, err.code, err.err_code) == ("JSStreamNotFoundErr", 404, 10059)
    assert str(err) == "stream not found (10059)"
