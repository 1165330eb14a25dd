"""A failing client's reason is one line: the exception, without Ray's traceback or terminal colour codes."""

from __future__ import annotations

from fl_privtext.federation.faults import MAX_REASON, one_line

RAY_TRACE = (
    "\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=4242, ip=10.0.0.1, actor_id=abc)\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.11/site-packages/flwr/simulation/ray_transport/ray_actor.py", line 63, in run\n'
    "    out_message = app(message=message, context=context)\n"
    '  File "/work/fl_privtext/client.py", line 226, in client_upload\n'
    "    raise ValueError(msg)\n"
    "\x1b[31mValueError: client 3: 2 row(s) of the cached features are not finite; refusing to upload.\x1b[0m\n"
)


def test_ray_traceback_becomes_its_exception_line() -> None:
    reason = one_line(RAY_TRACE)
    assert reason == "ValueError: client 3: 2 row(s) of the cached features are not finite; refusing to upload."
    assert "\x1b" not in reason and "\n" not in reason and "Traceback" not in reason


def test_plain_messages_and_long_ones() -> None:
    assert one_line("no reply within 5 s") == "no reply within 5 s"
    assert one_line("") == "unknown error (no message)"
    assert one_line("  first\n\n  last line  \n") == "last line"
    long = one_line("RuntimeError: " + "x" * 1000)
    assert len(long) == MAX_REASON and long.endswith("...") and long.startswith("RuntimeError: x")
    # a wrapped exception (qualified name) is still found, and the final one wins
    assert one_line("KeyError: 'a'\nDuring handling...\nflwr.common.ClientAppException: boom") == (
        "flwr.common.ClientAppException: boom")


def test_flowers_bare_wrapper_line_is_skipped_for_the_inner_exception() -> None:
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
            "ValueError: client 1: row 33 is non-finite\n\nThe above exception was the direct cause:\n"
            "flwr.clientapp.client_app.ClientAppException:\n")
    assert one_line(text) == "ValueError: client 1: row 33 is non-finite"
