"""The harness: the world recorded sessions, fault cells and fuzzed calls
run in, and what their oracles look at. Pytest-free.

- ``world``: ``FakeWorld`` (frozen clock, fake filesystem, decoys: one context
  manager), built on ``clock``, ``fake_filesystem`` and ``files``;
- ``probes``: handler runs, changes outside the workspace, threads left
  running, audit rows;
- ``session``: the runtime of a recorded session (secrets, approvals and
  HTTP playback filled in);
- ``failing_store``: an audit store that fails on demand.

Replay (``replay.player``, ``replay.tape``), the fault matrix (``faults``)
and the fuzzer (``fuzz``) are thin users of it.
"""
