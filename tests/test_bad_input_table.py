"""Bad input, one table: every `numabench` subcommand and every numabench pytest option given a
bad value ends in ONE line that names the value, no traceback, and the project's exit code:
2 for the numabench command (argparse's usage code, which the CLI uses for every bad input),
4 for pytest options (pytest's usage error; `numabench plan` passes pytest's on). Each row runs
the real command in a subprocess (~0.1 s for the CLI, ~0.3 s for a pytest collection)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED_CSV = ROOT / "tests" / "data" / "seed" / "qwen2.5-7B_normal_interleave.csv"
GPU = ["--gpu", "NVIDIA H100 80GB HBM3"]
HEADER = "ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Inputs good and bad: {d}/run.json is a good run (the seed CSV imported)."""
    d = tmp_path_factory.mktemp("inputs")
    out = subprocess.run([sys.executable, "-m", "numabench", "import-csv", str(SEED_CSV), "--out", str(d / "run.json"),
                          *GPU], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (d / "dir").mkdir()
    (d / "bin.json").write_bytes(b'{"benchmarks": ["\xff\xfe"]}')
    (d / "empty.json").write_text("")
    (d / "cut.json").write_text((d / "run.json").read_text()[:200])
    (d / "list.json").write_text("[]")
    (d / "junk.json").write_text(json.dumps({"machine_info": {}, "benchmarks": [1, 2]}))
    (d / "nokey.json").write_text(json.dumps({"machine_info": {}, "benchmarks": []}))
    (d / "exists.txt").write_text("keep me")
    (d / "bin.csv").write_bytes(b"ngpus,numa_nodes,update_element\n1,0,\xff\n")
    (d / "empty.csv").write_text("")
    (d / "cols.csv").write_text("a,b,c\n1,2,3\n")
    (d / "num.csv").write_text(f"{HEADER}\nx,0,1835008,0.5,0.01,0.5\n")
    return d


# (id, numabench arguments ({d}: the files folder, {csv}: the seed CSV), a text the one line must hold)
CLI = [
    ("compare-missing", "compare {d}/nope.json {d}/run.json", "{d}/nope.json does not exist"),
    ("compare-directory", "compare {d}/dir {d}/run.json", "{d}/dir is a directory"),
    ("compare-non-utf8", "compare {d}/bin.json {d}/run.json", "{d}/bin.json is not UTF-8"),
    ("compare-empty", "compare {d}/empty.json {d}/run.json", "{d}/empty.json is not valid JSON"),
    ("compare-truncated", "compare {d}/cut.json {d}/run.json", "{d}/cut.json is not valid JSON"),
    ("compare-not-a-run", "compare {d}/list.json {d}/run.json", "{d}/list.json has no 'benchmarks' list"),
    ("compare-entries-not-objects", "compare {d}/junk.json {d}/run.json", "benchmarks[0] is 1"),
    ("compare-threshold-word", "compare {d}/run.json {d}/run.json --threshold=abc", "'abc'"),
    ("compare-threshold-negative", "compare {d}/run.json {d}/run.json --threshold=-5%", "'-5%'"),
    ("compare-coarsest-word", "compare {d}/run.json {d}/run.json --coarsest=xyz", "'xyz'"),
    ("compare-three-runs", "compare {d}/run.json {d}/run.json {d}/run.json", "got 3 runs"),
    # values that would switch the gate off, or run for ever, are refused
    ("compare-coarsest-0", "compare {d}/run.json {d}/run.json --coarsest=0", "--coarsest 0: allowed a number > 0% and at most 10000%"),
    ("compare-coarsest-0pct", "compare {d}/run.json {d}/run.json --coarsest=0%", "--coarsest 0%: allowed a number > 0% and at most 10000%"),
    ("ab-pairs-huge", "ab HEAD --pairs 1e20", "--pairs 1e20: allowed a whole number from 2 to 1000 pairs"),
    ("plan-ab-pairs-huge", "plan --ab-pairs 1e20 benchmarks", "--ab-pairs 1e20: allowed a whole number from 2 to 1000 pairs"),
    ("learn-window-url", "learn {d}/run.json --window http://u:PW@host:1/w", "--window http://u:***@host:1/w: a URL"),
    ("compare-format", "compare {d}/run.json {d}/run.json --format=xml", "'xml'"),
    ("compare-no-key", "compare {d}/nokey.json", "{d}/nokey.json records no hardware key"),
    ("report-missing", "report {d}/nope.json", "{d}/nope.json does not exist"),
    ("report-out-a-file", "report {d}/run.json --out {d}/exists.txt", "--out {d}/exists.txt is a file"),
    ("report-where-no-equals", "report {d}/run.json --where dtype", "'dtype'"),
    ("report-where-unknown-axis", "report {d}/run.json --where nosuch=1", "'nosuch=1'"),
    ("report-family", "report {d}/run.json --family nosuch", "--family 'nosuch'"),
    ("advise-where", "advise {d}/run.json --where x", "'x'"),
    ("advise-family", "advise {d}/run.json --family nosuch", "--family 'nosuch'"),
    ("advise-non-utf8", "advise {d}/bin.json", "{d}/bin.json is not UTF-8"),
    ("csv-missing", "csv {d}/nope.json", "{d}/nope.json does not exist"),
    ("csv-dtype", "csv {d}/run.json --dtype fp8", "dtype 'fp8'"),
    ("csv-impl", "csv {d}/run.json --impl nosuch", "impl 'nosuch'"),
    ("csv-schedule", "csv {d}/run.json --schedule nosuch", "schedule 'nosuch'"),
    ("csv-entries-not-objects", "csv {d}/junk.json", "benchmarks[0] is 1"),
    ("import-csv-missing", "import-csv {d}/nope.csv --out {d}/o.json", "{d}/nope.csv does not exist"),
    ("import-csv-directory", "import-csv {d}/dir --out {d}/o.json", "{d}/dir is a directory"),
    ("import-csv-non-utf8", "import-csv {d}/bin.csv --out {d}/o.json", "{d}/bin.csv is not UTF-8"),
    ("import-csv-empty", "import-csv {d}/empty.csv --out {d}/o.json", "header ''"),
    ("import-csv-columns", "import-csv {d}/cols.csv --out {d}/o.json", "header 'a,b,c'"),
    ("import-csv-number", "import-csv {d}/num.csv --out {d}/o.json", "ngpus 'x' is not a number"),
    ("import-csv-out-exists", "import-csv {csv} --out {d}/exists.txt", "{d}/exists.txt exists"),
    ("import-csv-out-no-folder", "import-csv {csv} --out {d}/nodir/o.json", "{d}/nodir does not exist"),
    ("import-csv-numa-nodes-0", "import-csv {csv} --out {d}/o.json --numa-nodes=0", "numa nodes 0"),
    ("import-csv-numa-nodes-word", "import-csv {csv} --out {d}/o.json --numa-nodes=abc", "'abc'"),
    ("import-csv-dtype", "import-csv {csv} --out {d}/o.json --dtype fp8", "'fp8'"),
    ("import-csv-gpu-empty", "import-csv {csv} --out {d}/o.json --gpu=", "GPU model ''"),
    ("merge-missing", "merge {d}/m.json {d}/nope.json", "{d}/nope.json does not exist"),
    ("merge-out-exists", "merge {d}/exists.txt {d}/run.json --allow-no-data", "{d}/exists.txt exists"),
    ("merge-out-no-folder", "merge {d}/nodir/m.json {d}/run.json --allow-no-data", "{d}/nodir does not exist"),
    ("learn-missing", "learn {d}/nope.json --window {d}/w", "{d}/nope.json does not exist"),
    ("learn-keep-0", "learn {d}/run.json --window {d}/w --keep 0", "--keep 0"),
    ("learn-window-a-file", "learn {d}/run.json --window {d}/exists.txt", "--window {d}/exists.txt is a file"),
    ("learn-seed-missing", "learn {d}/run.json --window {d}/w2 --seed {d}/nope.json", "{d}/nope.json does not exist"),
    ("history-threshold", "history {d}/dir --threshold abc", "'abc'"),
    ("history-no-runs", "history {d}/nohist", "{d}/nohist"),
    ("topo-root", "topo --root {d}/noroot", "--root {d}/noroot"),
    ("fleet-index", "fleet pull --index notaurl --output {d}/f.json --key k", "'notaurl'"),
    ("fleet-last", "fleet pull --index http://127.0.0.1:9/i --output {d}/f.json --last 0", "--last=0"),
    ("build-kernel", "build nosuch", "nosuch"),
    ("ab-pairs", "ab HEAD --pairs 0", "--pairs 0"),
    ("ab-env", "ab HEAD --base-env FOO", "'FOO'"),
    ("ab-confidence", "ab HEAD --confidence 2", "--confidence 2: allowed a number > 0 and below 1"),
    ("ab-coarsest-0", "ab HEAD --coarsest 0%", "--coarsest 0%: allowed a number > 0% and at most 10000%"),
    ("ab-coarsest-word", "ab HEAD --coarsest abc", "--coarsest abc: allowed a number > 0% and at most 10000%"),
    ("ab-format", "ab HEAD --format html", "'html'"),
    ("ab-no-base", "ab", "ab needs BASE"),
    ("ab-json-no-folder", "ab HEAD --json {d}/nodir/ab.json", "--json {d}/nodir/ab.json: {d}/nodir is not a folder"),
    ("ab-show-missing", "ab --show {d}/nope.json", "--show {d}/nope.json: No such file"),
    ("ab-show-not-ab", "ab --show {d}/run.json", "--show {d}/run.json: {d}/run.json: schema None"),
    ("ab-show-not-json", "ab --show {d}/empty.json", "--show {d}/empty.json: Expecting value"),
    ("ab-show-and-base", "ab HEAD --show {d}/run.json", "--show {d}/run.json: renders a saved A/B run"),
    ("plan-ab-pairs-1", "plan --ab-pairs 1 benchmarks/test_touch.py", "--ab-pairs 1: allowed a whole number from 2 to 1000 pairs"),
    ("plan-ab-pairs-word", "plan benchmarks/test_touch.py --ab-pairs=abc", "--ab-pairs abc"),
    ("plan-ab-pairs-no-value", "plan benchmarks/test_touch.py --ab-pairs", "--ab-pairs needs a value"),
    ("plan-ab-pairs-list", "plan --list --ab-pairs 3", "--ab-pairs goes with a plan of benchmarks"),
    ("no-such-command", "frobnicate", "'frobnicate'"),
]
# `numabench plan` hands its arguments to pytest: pytest's usage error, its code (4), in one line
PLAN = [
    ("plan-policy", "plan benchmarks/test_touch.py --numa-policies=bind:abc", "'bind:abc'"),
    ("plan-path", "plan {d}/no_tests_here", "{d}/no_tests_here"),
    ("plan-option", "plan benchmarks/test_touch.py --no-such-option", "--no-such-option"),
]
# pytest options (collected only: the check runs before anything else)
PYTEST = [
    ("policy-node-twice", "--numa-policies=interleave:0,0", "node 0 named twice in '0,0'"),
    ("policy-weight-twice", "--numa-policies=weighted:0=1,0=2", "'weighted:0=1,0=2'"),
    ("policy-preferred-two", "--numa-policies=preferred:0,1", "'preferred:0,1'"),
    ("policy-no-nodes", "--numa-policies=bind:", "'bind:'"),
    ("policy-node-huge", "--numa-policies=bind:99999999999999999999", "node 99999999999999999999"),
    ("policy-empty", "--numa-policies=;;", "';;'"),
    ("size-1e99", "--param-sizes=1e99", "'1e99'"),
    ("size-fraction", "--param-sizes=1.5", "'1.5'"),
    ("size-empty", "--param-sizes=", "''"),
    ("dtype-fp8", "--dtypes=fp8", "'fp8'"),
    ("nprocess-word", "--nprocess=abc", "'abc'"),
    ("nprocess-huge", "--nprocess=99999999999999999999", "99999999999999999999"),
    ("rounds-word", "--numa-rounds=abc", "--numa-rounds=abc"),
    ("warmup-negative", "--numa-warmup=-1", "--numa-warmup=-1"),
    ("timeout-nan", "--numa-timeout=nan", "--numa-timeout=nan"),
    ("tolerance-negative", "--numa-tolerance=-1", "--numa-tolerance=-1"),
    ("host-memory-0", "--numa-host-memory=0", "--numa-host-memory=0"),
    ("repeats-0", "--numa-repeats=0", "--numa-repeats=0"),
    ("axis-no-equals", "--numa-axis=impl", "'impl'"),
    ("axis-unknown", "--numa-axis=nosuch=1", "'nosuch'"),
    ("axis-value", "--numa-axis=impl=bogus", "bogus"),
    ("axis-knob-value", "--numa-axis=chunk_numel=abc", "--numa-axis chunk_numel: 'abc'"),
    ("tier", "--numa-tier=huge", "--numa-tier=huge"),
    ("launcher", "--numa-launcher=x", "--numa-launcher=x"),
    ("gate-threshold", "--numa-gate-threshold=abc", "'abc'"),
    ("gate-coarsest", "--numa-gate-coarsest=-1%", "--numa-gate-coarsest=-1%: allowed a number > 0%"),
    ("gate-coarsest-0", "--numa-gate-coarsest=0", "--numa-gate-coarsest=0: allowed a number > 0% and at most 10000%"),
    ("warmup-huge", "--numa-warmup=100000000000000000000", "allowed a whole number from 0 to 10000 rounds"),
    ("rounds-huge", "--numa-rounds=1000001", "allowed a whole number from 1 to 100000 rounds"),
    ("tolerance-huge", "--numa-tolerance=1000", "--numa-tolerance=1000.0: allowed a number from 0 to 100 percentage points"),
    ("benchmark-compare", "--benchmark-compare=9999", "'9999'"),
    ("benchmark-json-no-folder", "--benchmark-json={d}/nodir/x.json", "{d}/nodir/x.json"),
    ("benchmark-json-a-folder", "--benchmark-json={d}/dir", "{d}/dir"),
    # empty entries in a list, and numbers in digits other than ASCII's (int() reads '٠' and '０' as 0)
    ("policy-empty-entry", "--numa-policies=bind:0;;", "'bind:0;;'"),
    ("policy-arabic-indic-digit", "--numa-policies=bind:\u0660", "'\u0660'"),
    ("policy-fullwidth-digit", "--numa-policies=bind:\uff10", "'\uff10'"),
    ("policy-underscore", "--numa-policies=bind:1_0", "'1_0'"),
    ("policy-weight-fullwidth", "--numa-policies=weighted:0=\uff12", "'0=\uff12'"),
    ("size-fullwidth", "--param-sizes=\uff11M", "'\uff11M'"),
    ("size-underscore", "--param-sizes=1_000", "'1_000'"),
    ("nprocess-empty-entry", "--nprocess=1,,2", "'1,,2'"),
    ("nprocess-arabic-indic", "--nprocess=\u0662", "'\u0662'"),
    ("dtypes-empty-entry", "--dtypes=fp32,,fp16", "'fp32,,fp16'"),
    ("rounds-arabic-indic", "--numa-rounds=\u0663", "--numa-rounds=\u0663"),
    ("timeout-fullwidth", "--numa-timeout=\uff13\uff10", "--numa-timeout=\uff13\uff10"),
    ("axis-empty-entry", "--numa-axis=impl=ours,", "'impl=ours,'"),
    ("axis-knob-arabic-indic", "--numa-axis=chunk_numel=\u0663", "'\u0663'"),
    ("gate-threshold-fullwidth", "--numa-gate-threshold=\uff15%", "'\uff15%'"),
]

ROWS = ([pytest.param([sys.executable, "-m", "numabench", *args.split(" ")], 2, text, id=f"cli-{name}")
         for name, args, text in CLI]
        + [pytest.param([sys.executable, "-m", "numabench", *args.split(" ")], 4, text, id=f"cli-{name}")
           for name, args, text in PLAN]
        + [pytest.param([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "--co", "-q", "-p",
                         "no:cacheprovider", "--benchmark-storage=file://{d}/store", option], 4, text,
                        id=f"pytest-{name}") for name, option, text in PYTEST])


def test_the_table_is_wide():
    assert len(ROWS) >= 56
    assert {args.split(" ")[0] for _, args, _ in CLI} >= {"compare", "report", "advise", "csv", "import-csv",
                                                        "merge", "learn", "history", "topo", "fleet", "build", "ab"}


@pytest.mark.parametrize("command, code, text", ROWS)
def test_a_bad_input_is_one_line_and_a_usage_exit_code(files, command, code, text):
    def fill(s: str) -> str:
        return s.replace("{d}", str(files)).replace("{csv}", str(SEED_CSV))

    cmd = [fill(a) for a in command]
    if cmd[3:4] == ["import-csv"] and "--gpu=" not in cmd:
        cmd += GPU
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    text_out = out.stdout + out.stderr
    assert "Traceback" not in text_out, text_out[-3000:]
    lines = [ln for ln in text_out.splitlines() if ln.strip()]
    assert out.returncode == code and len(lines) == 1, (out.returncode, text_out[-3000:])
    assert fill(text) in lines[0], lines[0]
    assert (files / "exists.txt").read_text() == "keep me"  # never overwritten


def test_a_url_given_as_the_window_folder_makes_no_folder_and_prints_no_password(files, tmp_path):
    out = subprocess.run([sys.executable, "-m", "numabench", "learn", str(files / "run.json"), "--window",
                          "http://u:PW@host:1/w"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "PW" not in out.stdout + out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []  # no ./http:/u:PW@host:1/w/ made


@pytest.mark.parametrize("option, text", [
    ("--numa-policies=bind:0;bind:0", "policy bind:0 named twice in 'bind:0;bind:0': allowed each once"),
    ("--param-sizes=1M,1M", "size 1000000 named twice in '1M,1M': allowed each once"),
    ("--dtypes=fp32,fp32", "dtype fp32 named twice in 'fp32,fp32': allowed each once"),
    ("--nprocess=1,1", "nprocess 1 named twice in '1,1': allowed each once"),
    ("--numa-policies=bind:0-99999999", "node 0-99999999 in '0-99999999': allowed node ids 0..1023"),
    ("--numa-policies=weighted:0=1,5000=1", "node 5000 in 'weighted:0=1,5000=1': allowed nodes 0 to 1023"),
], ids=["policy", "size", "dtype", "nprocess", "node-range", "weighted-node"])
def test_an_axis_value_named_twice_or_beyond_any_machine_is_refused_at_once(option, text):
    """Each would run and be saved twice (as ids no baseline matches), or spell out 10^8 nodes."""
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "--co", "-q", "-p",
                          "no:cacheprovider", option], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode == 4 and len(lines) == 1 and text in lines[0], out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "0"])
def test_a_malformed_injected_slowdown_is_a_usage_error_not_every_case_s_failure(value):
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "--co", "-q", "-p",
                          "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NUMABENCH_INJECT_SLOWDOWN": value})
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode == 4 and lines == [f"ERROR: NUMABENCH_INJECT_SLOWDOWN={value!r}: allowed a number from 1 "
                                             "to 100 times, e.g. 1.05 for 5% slower"], out.stdout + out.stderr


def test_a_run_holding_an_entry_twice_or_a_fifo_is_refused(files, tmp_path):
    run = json.loads((files / "run.json").read_text())
    run["benchmarks"].append(run["benchmarks"][0])
    (tmp_path / "twice.json").write_text(json.dumps(run))
    out = subprocess.run([sys.executable, "-m", "numabench", "compare", str(files / "run.json"),
                          str(tmp_path / "twice.json")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "again: allowed each entry once" in out.stderr, out.stderr
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "numabench", "report", str(fifo)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)  # it blocked for ever
    assert out.returncode == 2 and f"run file {fifo} is not a regular file" in out.stderr, out.stderr


@pytest.mark.parametrize("name, value, text", [
    ("NUMABENCH_BUILD_TIMEOUT_S", "abc", "NUMABENCH_BUILD_TIMEOUT_S='abc': allowed a number > 0 and at most 86400 seconds"),
    ("NUMABENCH_BUILD_TIMEOUT_S", "0", "NUMABENCH_BUILD_TIMEOUT_S='0': allowed a number > 0 and at most 86400 seconds"),
    ("NUMABENCH_BUILD_TIMEOUT_S", "-5", "NUMABENCH_BUILD_TIMEOUT_S='-5': allowed a number > 0 and at most 86400 seconds"),
    ("NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S", "abc", "NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S='abc': allowed a number"),
], ids=["build-word", "build-0", "build-negative", "weights-lock-word"])
def test_a_time_limit_that_is_no_number_of_seconds_is_a_usage_error_at_once(name, value, text):
    """Taken silently before (or a traceback at import): a build killed at once, a lock never waited."""
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "--co", "-q", "-p",
                          "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, name: value})
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert out.returncode == 4 and len(lines) == 1 and text in lines[0], out.stdout + out.stderr
    if name == "NUMABENCH_BUILD_TIMEOUT_S":
        build = subprocess.run([sys.executable, "-m", "numabench", "build"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120, env={**os.environ, name: value})
        assert build.returncode == 2 and build.stderr.strip().splitlines() == [f"numabench: {text}, e.g. 900"]


def test_first_touch_of_more_than_any_host_holds_is_refused():
    out = subprocess.run([sys.executable, "-m", "numabench", "first-touch", "--gib", "1e30"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == "numabench: --gib 1e+30: allowed a number > 0 and at most 1048576 GiB"


@pytest.mark.parametrize("rounds", [-3, 0, 2.5, "5", True])
def test_a_run_with_rounds_that_are_no_count_is_refused(files, tmp_path, rounds):
    run = json.loads((files / "run.json").read_text())
    run["benchmarks"][0]["stats"]["rounds"] = rounds
    (tmp_path / "bad.json").write_text(json.dumps(run))
    out = subprocess.run([sys.executable, "-m", "numabench", "report", str(tmp_path / "bad.json")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"stats.rounds is {json.dumps(rounds)}: allowed a whole number from 1" in out.stderr
