"""The benchmark's quick mode runs in the suite so that it never rots. No speed is asserted."""

import json

from whisper_demo import bench


def test_quick_benchmark_writes_table_json_and_chart(tmp_path, capsys):
    assert bench.main(["--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "bench.json").read_text())
    by_name = {c["name"]: c for c in report["contenders"]}

    assert {"static", "hooks", "off", "whisper.decode"} <= set(by_name)
    # the cache never changes the result, and we pick what openai-whisper picks
    for name in ("hooks", "off", "whisper.decode"):
        assert by_name[name]["same_tokens"] is True, name
    assert by_name["static"]["tokens"] > 3
    assert by_name["static"]["peak_cache_bytes"] > 0 and by_name["off"]["peak_cache_bytes"] == 0
    assert len(by_name["static"]["curve_ms"]) == by_name["static"]["tokens"] + 1  # + the EOT step
    assert "cache speedup (off / static)" in report["ratios"]
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    assert "static" in printed and "ms/tok" in printed
