"""specguard.sources: where the judge's data comes from (the I/O edge).

- ``router_feed``: the routers' ``GET /samples`` feed, one cursor per router (``RouterFeed``);
- ``prometheus``: per-arm PromQL over vLLM's TPOT histogram (``PrometheusSource``);
- ``scrape``: direct ``/metrics`` scrapes of the vLLM pods (``ScrapeSource``);
- ``exposition``: parsing vLLM's metrics and subtracting readings.

See docs/judge.md.
"""
