"""The secure-profile benchmark's summary: medians per profile and the ratios (no broker)."""

from __future__ import annotations

from benchmarks.secure import summary


def _rec(system: str, profile: str, value: float) -> dict[str, object]:
    return {"benchmark": "secure", "system": system, "params": {"profile": profile},
            "metric": "throughput", "value": value, "unit": "events/s"}


def test_the_summary_pairs_each_system_across_profiles() -> None:
    records = [_rec("dls", "plaintext", v) for v in (100, 300, 200)] + [
        _rec("dls", "secure", v) for v in (50, 150, 100)] + [
        _rec("passthrough", "plaintext", 400), _rec("passthrough", "secure", 200)]
    out = {(r["system"], r["metric"], r["params"].get("profile")): r["value"]
           for r in summary(records)}
    assert out["dls", "throughput_median", "plaintext"] == 200
    assert out["dls", "throughput_median", "secure"] == 100
    assert out["dls", "secure_over_plaintext", None] == 0.5
    assert out["passthrough", "secure_over_plaintext", None] == 0.5
    assert out["dls", "dls_over_passthrough", "plaintext"] == 0.5
    assert out["dls", "dls_over_passthrough", "secure"] == 0.5


def test_a_profile_not_run_gives_no_ratio() -> None:
    out = summary([_rec("dls", "plaintext", 10.0)])
    assert [r["metric"] for r in out] == ["throughput_median"]
