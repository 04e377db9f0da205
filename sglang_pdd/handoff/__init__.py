"""The handoff of one relayed (P-RLD-MD) request from Relay-Decode to Main-Decode.

* ``signals``: what the router's loop feeds the core (inputs) and what the core asks it to do
  (actions), as frozen dataclasses.
* ``core``: ``HandoffCore``, the pure state machine that owns all of a relayed request's
  handoff state: ``on(input) -> [actions]``.
* ``steps``: ``RelayedHandoff``, the step planner inside the core (what to send MD next), which
  the simulator drives directly.
"""
