"""The mirror share the operator writes to ``status.arms.mirrorShare``, where the routers read
it (every 2 s).

Pure. The routers match the arms' load themselves: a router copies a serving request to the
shadow arm only while the shadow arm holds no more requests in flight per pod than the
serving arm (``router.Topology.shadow_has_room``). Both arms are then measured at the
concurrency the serving pods really run, whichever arm is faster: a slower shadow gets fewer
copies than a serving pod gets requests, a faster one more. The share is therefore not a
control variable but a switch with a ceiling — the largest fraction of serving requests the
routers may copy:

- ``MIRROR_SHARE`` (every request, if the shadow has room) while the shadow is judged and
  both arms have ready pods;
- 0 when nothing is to be mirrored: no ready pod on either arm, a swap in progress (the
  routers then answer clients from both arms' pods and judge nothing), the periodic shadow
  between its active periods.

Why not an arrival-rate share (shadow ready ÷ serving ready pods, corrected from what the
routers mirrored), as before: at one arrival rate the faster arm holds fewer requests in
flight (Little's law), so under clients that keep a fixed number of requests open (agents,
batch jobs, a closed loop) the comparison depended on which arm served. With 288 tool-call
streams on 2 drafter pods and 1 baseline shadow it said "regressed" (the baseline shadow at
~95 in flight against the drafter pods' 144); after the rollback the drafter shadow, given a
serving pod's arrivals, settled at ~70 in flight where it is faster and it said "improved",
so the drafter came back into the traffic that had just rolled it back. Matching in flight,
both windows compare the arms at 144.
"""

from __future__ import annotations

MIRROR_SHARE = 1.0


def mirror_share(*, shadow_ready: int, serving_ready: int, judging: bool) -> float:
    """The share to write: ``MIRROR_SHARE`` when the shadow is judged (``judging``: active,
    no swap) and both arms have a ready pod, else 0."""
    return MIRROR_SHARE if judging and shadow_ready > 0 and serving_ready > 0 else 0.0
