"""specguard.judge: pure verdicts on per-token latency and the decision policy (no I/O).

- ``sample``: the per-request Sample record (the schema shared with router and evaluate);
- ``verdict``: one window of samples → ``Verdict`` (``judge``, ``JudgeSettings``);
- ``histogram``: per-arm TPOT histograms → ``Verdict`` (coarser; ``judge_histograms``);
- ``policy``: successive verdicts + guardrails → ``Decision`` (``step``, ``PolicySettings``);
- ``synthetic``: windows with known truth for validation;
- ``command``: ``specguard judge SAMPLES.jsonl``.

See docs/judge.md.
"""
