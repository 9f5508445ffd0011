"""Count a ``runtime.bus.Batcher``'s round trips, for tests that pin how many a step takes."""

from __future__ import annotations

from typing import Any

from runtime import bus


def count_round_trips(batcher: bus.Batcher, r: Any) -> list[list[str]]:
    """From now on, each round trip ``batcher`` makes appends the names of its commands, in order, to
    the list returned (the trips still run on the server)."""
    trips: list[list[str]] = []
    real = batcher._round_trip

    async def counted(builds: list[Any], retry: bool = True) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        for build in builds:
            build(pipe)
        trips.append([str(c[0][0]).split()[0] for c in pipe.command_stack])  # each command's name
        return await real(builds, retry)

    batcher._round_trip = counted  # type: ignore[method-assign]
    return trips


def record_pipelines(r: Any, monkeypatch: Any) -> list[list[str]]:
    """From now on (until ``monkeypatch`` undoes it), each pipeline made from ``r`` appends the list of
    its commands' names, filled as they are queued, to the list returned."""
    sent: list[list[str]] = []
    pipeline = r.pipeline

    def recording(*a: Any, **kw: Any) -> Any:
        pipe, names = pipeline(*a, **kw), []
        send = pipe.execute_command
        pipe.execute_command = lambda *args, **o: (names.append(str(args[0]).split()[0]), send(*args, **o))[1]
        sent.append(names)
        return pipe

    monkeypatch.setattr(r, "pipeline", recording)
    return sent
