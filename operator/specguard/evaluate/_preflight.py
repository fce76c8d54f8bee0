"""Checks before a sweep: each endpoint answers, serves the model, and the with-drafter one
exports spec-decode counters. Each problem is one line for the user, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp

from specguard.evaluate._cells import Variant
from specguard.evaluate._sweep import Target
from specguard.sources import Reading, parse_reading

LABELS: dict[str, str] = {
    "speculative": "--with-drafter",
    "baseline": "--without-drafter",
    "schedule": "--with-variant",
    "adaptive": "--with-variant",
}


class PreflightError(RuntimeError):
    """The sweep cannot start; the message is one line."""


@dataclass(slots=True)
class Preflight:
    targets: dict[str, Target]
    # False when the with-drafter endpoint has no spec-decode counters (no acceptance length).
    spec_metrics: bool
    # The drafter's k as the per-position counter shows it, when exported.
    draft_positions: int | None
    warnings: list[str] = field(default_factory=list)


async def _models(session: aiohttp.ClientSession, arm: str, url: str) -> list[str]:
    flag = LABELS[arm]
    try:
        async with session.get(f"{url}/v1/models") as resp:
            if resp.status != 200:
                raise PreflightError(
                    f"{flag} {url}: GET /v1/models answered HTTP {resp.status} "
                    "(is this an OpenAI-compatible server that has finished loading?)"
                )
            data = await resp.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError) as exc:
        reason = str(exc) or type(exc).__name__
        raise PreflightError(f"{flag} {url}: unreachable ({reason})") from exc
    except ValueError as exc:
        raise PreflightError(f"{flag} {url}: GET /v1/models did not return JSON") from exc
    items = data.get("data") if isinstance(data, dict) else None
    ids = [m["id"] for m in items or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if not ids:
        raise PreflightError(f"{flag} {url}: GET /v1/models lists no model")
    return ids


async def _metrics(session: aiohttp.ClientSession, url: str) -> Reading | None:
    try:
        async with session.get(f"{url}/metrics") as resp:
            if resp.status != 200:
                return None
            return parse_reading(await resp.text())
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None


async def check(
    with_drafter: str,
    without_drafter: str,
    model: str | None,
    variant: tuple[Variant, str] | None = None,
) -> Preflight:
    """``variant``: a third endpoint (--with-variant) running the schedule or adaptive
    verification, checked like the with-drafter one."""
    urls: dict[str, str] = {
        "speculative": with_drafter.rstrip("/"),
        "baseline": without_drafter.rstrip("/"),
    }
    if variant is not None:
        urls[variant[0]] = variant[1].rstrip("/")
    timeout = aiohttp.ClientTimeout(total=15, sock_connect=5)
    warnings: list[str] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        served: dict[str, list[str]] = {}
        for arm, url in urls.items():
            served[arm] = await _models(session, arm, url)
        names: dict[str, str] = {}
        for arm, ids in served.items():
            if model is None:
                names[arm] = ids[0]
            elif model in ids:
                names[arm] = model
            else:
                raise PreflightError(
                    f"--model: {model!r} is not served by {LABELS[arm]} {urls[arm]} "
                    f"(it serves: {', '.join(ids)})"
                )
        if names["speculative"] != names["baseline"]:
            warnings.append(
                f"the endpoints serve different model names ({names['speculative']!r} vs "
                f"{names['baseline']!r}); pass --model if they are not the same model"
            )
        spec_snap = await _metrics(session, urls["speculative"])
        base_snap = await _metrics(session, urls["baseline"])
        if variant is not None:
            var_snap = await _metrics(session, urls[variant[0]])
            if var_snap is None or not var_snap.has_spec_decode:
                warnings.append(
                    f"--with-variant {urls[variant[0]]}: /metrics has no vllm:spec_decode_* "
                    "counters (is the drafter on?); its acceptance length will not be reported"
                )
    spec_has = spec_snap is not None and spec_snap.has_spec_decode
    base_has = base_snap is not None and base_snap.has_spec_decode
    if not spec_has and base_has:
        raise PreflightError(
            f"--with-drafter {urls['speculative']} exports no spec-decode metrics but "
            f"--without-drafter {urls['baseline']} does: the two URLs look swapped"
        )
    if spec_snap is None:
        warnings.append(
            f"--with-drafter {urls['speculative']}: no readable /metrics; acceptance length "
            "will not be reported"
        )
    elif not spec_has:
        warnings.append(
            f"--with-drafter {urls['speculative']}: /metrics has no vllm:spec_decode_* counters "
            "(is the drafter on?); acceptance length will not be reported"
        )
    if base_has:
        warnings.append(
            f"--without-drafter {urls['baseline']}: exports spec-decode counters, so it runs a "
            "drafter too; the comparison is then drafter vs drafter"
        )
    targets = {
        name: Target(
            name=name,
            arm="baseline" if name == "baseline" else "speculative",
            url=urls[name],
            model=names[name],
            label=LABELS[name],
        )
        for name in urls
    }
    return Preflight(
        targets=targets,
        spec_metrics=spec_has,
        draft_positions=spec_snap.positions if spec_snap is not None else None,
        warnings=warnings,
    )


__all__ = ["LABELS", "Preflight", "PreflightError", "check"]
