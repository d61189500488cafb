"""Issue 17's abuse suite: "a client can never take the server down".

Every case attacks a live server (leafjet and the reference, over real sockets) and ends with
``Target.assert_survived()`` (tests/abuse/conftest.py): the process is alive and answers PING, a
bystander client in its own thread never waited more than 2 s for a PONG, and a stream written
before the attack still holds every acknowledged message.

    python -m pytest tests/abuse -q              # the short, seeded run (both server kinds)
    python -m pytest tests/abuse -q -m soak      # the long variants (or LEAFJET_SOAK=1)
"""
