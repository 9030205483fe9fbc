"""The declared shape of a run file, checked where one is read (``storage.run_from_text``).

A run file is pytest-benchmark's JSON (``--benchmark-save``, ``--benchmark-json``), a merged
baseline (``numabench merge``) or an imported seed CSV (``numabench import-csv``). Every command
that reads one (report, compare, merge, advise, history, publish, learn, fleet, ab, csv and the
pytest gate's ``--benchmark-compare``) gets it through ``storage.load_run``, which validates it
against ``RunFile`` below; past that point the code trusts what the schema promises:

- the run is an object with a ``benchmarks`` list; ``machine_info``, ``commit_info`` and
  ``numabench_memory`` are objects where present, with the fields numabench reads typed
  (a hardware key is a plain name: it becomes a folder under baselines/);
- each entry has a text ``fullname`` (once per run) and a ``stats`` object with a ``median``;
  every timing is a finite number of seconds > 0 (stddev and iqr >= 0), rounds and iterations
  whole numbers from 1, ``stats.data`` and the invocation medians lists of such seconds;
- a numabench case (``extra_info`` with a ``family`` and a ``phase``) has every axis of its
  family (nprocess, numel, dtype, policy and the family's own), each one value in its range.

Fields numabench does not read are kept as they are (pytest-benchmark and the families add their
own). The validation library is pydantic (v2): its core is compiled (a 4 MB baseline of 219
entries with their rounds validates in tens of milliseconds), it reports every error with the
path of the field, the rule broken and the value, and it is already what DeepSpeed (the
train_step family's engine) requires. ``run_file_json_schema()`` gives it as JSON Schema.
"""
from __future__ import annotations

import json
import math
from typing import Annotated, Any

from numabench.families import family_axes
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from numabench.cases import MAX_NUMEL
from numabench.machine.hwkey import KEY_PATTERN

# Bounds: far beyond any real run, near enough that arithmetic on them stays finite.
MAX_SECONDS = 1e9           # a timing of 30 years is a corrupt file, not a measurement
MAX_COUNT = 10**9           # rounds, iterations
MAX_NPROCESS = 4096         # one process per GPU
MAX_TEXT = 10_000           # a name, a phase, a policy
MAX_BYTES = MAX_NUMEL * 16  # the largest case's bytes with all its tensors

Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Spread = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
# a hardware key: the plain folder name machine/hwkey.py makes ('..' is refused by the validator)
HardwareKey = Annotated[str, Field(pattern=f"^{KEY_PATTERN.pattern}$")]


# A declared field may be absent; where present it has its type (null only where the type says
# so: a null numel or median is no value). pydantic does not validate a default.
ABSENT: Any = None


class OpenObject(BaseModel):
    """An object whose other fields are kept unchecked; the declared ones are typed strictly
    (no "1" for 1)."""
    model_config = ConfigDict(strict=True, extra="allow")


class Stats(OpenObject):
    # pytest-benchmark's order: the first problem reported is the first in the file
    min: Seconds = ABSENT
    max: Seconds = ABSENT
    mean: Seconds = ABSENT
    stddev: Spread = ABSENT
    rounds: Count = ABSENT
    median: Seconds
    iqr: Spread = ABSENT
    q1: Seconds = ABSENT
    q3: Seconds = ABSENT
    ld15iqr: Seconds = ABSENT
    hd15iqr: Seconds = ABSENT
    ops: Annotated[float, Field(gt=0, allow_inf_nan=False)] = ABSENT
    total: Seconds = ABSENT
    iterations: Count = ABSENT
    data: list[Seconds] = ABSENT


class Placement(OpenObject):
    rank: Annotated[int, Field(ge=0, le=MAX_NPROCESS)] = ABSENT
    policy: Text = ABSENT
    ok: bool = ABSENT
    kinds: list[dict[str, Any]] = ABSENT


Cpu = Annotated[int, Field(ge=0, le=1 << 20)] | None  # a rank's CPU, or null where not recorded
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # a fraction of some bytes


class ABBase(OpenObject):
    """extra_info.ab_base of a kept A/B session (numabench ab --session-json): the base side's
    measurements of each pair, beside the head's in the entry itself."""
    invocation_medians_s: list[Seconds] = ABSENT
    invocation_rounds_s: list[list[Seconds]] = ABSENT
    head_invocation_rounds_s: list[list[Seconds]] = ABSENT
    invocation_cpus: list[list[Cpu]] = ABSENT
    invocation_huge_shares: list[Share | None] = ABSENT
    confirmation_pairs: Annotated[int, Field(ge=0, le=MAX_COUNT)] = ABSENT
    pair_walls_s: list[Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]] = ABSENT
    run: Text = ABSENT


class ExtraInfo(OpenObject):
    family: Text = ABSENT
    phase: Text = ABSENT
    nprocess: Annotated[int, Field(ge=1, le=MAX_NPROCESS)] = ABSENT
    numel: Annotated[int, Field(ge=0, le=MAX_NUMEL)] = ABSENT
    numel_per_rank: Annotated[int, Field(ge=0, le=MAX_NUMEL)] = ABSENT
    bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)] = ABSENT
    dtype: Text = ABSENT
    policy: Text = ABSENT
    hardware_key: HardwareKey = ABSENT
    launcher: Text = ABSENT
    stats_from: Text = ABSENT
    GBps: Annotated[float, Field(ge=0, allow_inf_nan=False)] = ABSENT
    rounds: Count = ABSENT
    per_rank_median_s: list[Seconds] = ABSENT
    invocation_machines: list[Text | None] = ABSENT  # null: a machine not recorded
    invocation_sources: list[Text] = ABSENT
    invocation_medians_s: list[Seconds] = ABSENT  # gate.invocations.INVOCATION_MEDIANS
    # the copy rates measured beside the case (the report's ceilings), GB/s per rank
    limit_h2d_GBps_per_rank: list[Rate] = ABSENT
    limit_d2h_GBps_per_rank: list[Rate] = ABSENT
    limit_d2d_GBps_per_rank: list[Rate] = ABSENT
    limit_bidir_h2d_GBps_per_rank: list[Rate] = ABSENT
    limit_bidir_d2h_GBps_per_rank: list[Rate] = ABSENT
    placement: list[Placement] = ABSENT  # per rank: where its pages landed
    node_memory_per_rank: list[dict[str, Any] | None] = ABSENT  # per rank: numastat -p
    invocation_cpus: list[list[Cpu]] = ABSENT  # per invocation: each rank's CPU
    invocation_huge_shares: list[Share | None] = ABSENT  # per invocation: its buffers' share in huge pages
    ab_base: ABBase = ABSENT

    @model_validator(mode="after")
    def _a_numabench_entry_is_a_case(self) -> "ExtraInfo":
        """An entry with a family and a phase is one of our cases (tables, reports and the gate read it
        as one): it has every axis, each one value."""
        if self.family is None or self.phase is None:
            return self
        required, optional = family_axes(self.family)
        fields = {**(self.model_extra or {}), **{k: getattr(self, k) for k in type(self).model_fields}}
        missing = [axis for axis in required if fields.get(axis) is None]
        if missing:
            raise ValueError(f"{missing[0]} is missing: required in an entry of family {self.family!r} "
                             f"(each has {', '.join(required)})")
        for axis in (*required, *optional):
            if not _is_scalar(fields.get(axis)):
                shown = json.dumps(fields.get(axis), default=str)
                raise ValueError(f"{axis} is {shown[:37] + '...' if len(shown) > 40 else shown}: allowed "
                                 f"one value (text, a number or true/false): an axis of family {self.family!r}")
        return self


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool, int)) and (not isinstance(value, str) or len(value) <= MAX_TEXT)


class Entry(OpenObject):
    fullname: Text
    name: Text = ABSENT
    group: Text | None = None
    param: Text | None = None
    params: dict[str, Any] | None = None
    stats: Stats
    extra_info: ExtraInfo = Field(default_factory=ExtraInfo)
    options: dict[str, Any] | None = None


class NodeRecord(OpenObject):
    id: Annotated[int, Field(ge=0)] = ABSENT
    cpuless: bool = ABSENT


class NumabenchMachine(OpenObject):
    """machine_info.numabench: what fixtures/ recorded of the machine (machine/hwkey.py)."""
    hardware_key: HardwareKey = ABSENT
    machine_instance: Text = ABSENT
    gpus: list[Text] = ABSENT
    gpu_count: Annotated[int, Field(ge=0, le=MAX_NPROCESS)] = ABSENT
    gpu_models: list[Text] = ABSENT
    cpu_model: Text = ABSENT
    kernel: Text = ABSENT
    source: Text = ABSENT
    numa_nodes: Annotated[int, Field(ge=0)] = ABSENT
    cpuless_nodes: Annotated[int, Field(ge=0)] = ABSENT
    nodes: list[NodeRecord] = ABSENT
    import_warnings: list[Text] = ABSENT


class MachineInfo(OpenObject):
    node: Text = ABSENT
    numabench: NumabenchMachine = ABSENT


class CommitInfo(OpenObject):
    id: Text = ABSENT


class MemoryRecord(OpenObject):
    """A case that ran out of memory: its axes are read as an entry's are (the report's rows)."""
    fullname: Text = ABSENT
    name: Text = ABSENT
    extra_info: ExtraInfo
    message: Text = ABSENT
    predicted: Text | None = None


class MemoryOutcomes(OpenObject):
    host_bytes: Annotated[int, Field(ge=0)] = ABSENT
    host_source: Text = ABSENT
    gpu_bytes: list[Annotated[int, Field(ge=0)]] = ABSENT
    out_of_memory: list[MemoryRecord] = ABSENT


class MergedFrom(OpenObject):
    file: Text = ABSENT
    datetime: Text = ABSENT
    commit: Text = ABSENT
    merged_from: list["MergedFrom"] = ABSENT


class RunFile(OpenObject):
    benchmarks: list[Entry]
    machine_info: MachineInfo = Field(default_factory=MachineInfo)
    commit_info: CommitInfo | None = None
    datetime: Text = ABSENT
    version: Text = ABSENT
    numabench_memory: MemoryOutcomes = ABSENT
    numabench_merged_from: list[MergedFrom] = ABSENT

    @model_validator(mode="after")
    def _each_entry_once(self) -> "RunFile":
        seen: dict[str, int] = {}
        for i, entry in enumerate(self.benchmarks):
            if entry.fullname in seen:  # pooled, compared and merged twice over: a copy, not a run
                raise ValueError(f"benchmarks[{i}] {entry.fullname!r} is benchmarks[{seen[entry.fullname]}] "
                                 "again: allowed each entry once")
            seen[entry.fullname] = i
        return self

    @model_validator(mode="after")
    def _keys_stay_in_their_folder(self) -> "RunFile":
        nb = self.machine_info.numabench
        if nb is not None and nb.hardware_key is not None and ".." in nb.hardware_key:
            raise ValueError(f"machine_info.numabench.hardware_key {nb.hardware_key!r}: allowed a plain name "
                             "without '..' (it names a folder under baselines/)")
        return self


def run_file_json_schema() -> dict[str, Any]:
    """The declared shape as JSON Schema (for a reader in another language)."""
    return RunFile.model_json_schema()

TIMING_FIELDS = frozenset(Stats.model_fields) - {"rounds", "iterations"} | {"invocation_medians_s", "per_rank_median_s"}
ALLOWED_TIMING = "allowed a finite number of seconds > 0 (a corrupt or hand-edited run: re-save it or delete it)"


def field_path(loc: tuple) -> str:
    """pydantic's error location as the JSON path a reader finds: benchmarks[3].stats.median."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("function-"):
            continue  # a validator's name, not a field
        else:
            out += ("." if out else "") + str(part)
    return out


def _allowed(error: dict, field_rules: dict[str, str]) -> str:
    kind, ctx, loc = error["type"], error.get("ctx") or {}, [p for p in error["loc"] if isinstance(p, str)]
    named = [field_rules[p] for p in reversed(loc) if p in field_rules]  # the innermost field with a rule
    if named and kind not in ("missing", "string_type", "dict_type", "model_type", "model_attributes_type"):
        return named[0]
    bound = next((ctx[k] for k in ("ge", "gt", "le", "lt") if k in ctx), None)
    if kind in ("int_type", "int_from_float") or isinstance(bound, int) and not isinstance(bound, bool):  # an int field
        low, high = ctx.get("ge"), ctx.get("le")
        return "allowed a whole number" + (f" from {low}" if low is not None else "") + (
            f" up to {high}" if high is not None else "")
    return {
        "float_type": "allowed a finite number", "finite_number": "allowed a finite number",
        "greater_than": f"allowed a finite number > {ctx.get('gt')}",
        "greater_than_equal": f"allowed a finite number >= {ctx.get('ge')}",
        "less_than_equal": f"allowed a number <= {ctx.get('le')}", "less_than": f"allowed a number < {ctx.get('lt')}",
        "string_type": "allowed text", "string_too_long": f"allowed text of at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": "allowed a plain name of letters, digits, '.', '_' and '-' (it names a folder "
                                   "under baselines/)",
        "list_type": "allowed a list", "dict_type": "allowed a JSON object", "model_type": "allowed a JSON object",
        "model_attributes_type": "allowed a JSON object", "bool_type": "allowed true or false",
        "too_short": f"allowed a list of at least {ctx.get('min_length')}",
        "too_long": f"allowed a list of at most {ctx.get('max_length')}",
        "literal_error": f"allowed {ctx.get('expected')}",
    }.get(kind, f"allowed: {error['msg'][0].lower()}{error['msg'][1:]}")


# What a run file's fields allow, said as a reader of the file needs it (the innermost named
# field's rule wins over the library's generic one)
RUN_FIELD_RULES = {**{f: ALLOWED_TIMING for f in TIMING_FIELDS - {"stddev", "iqr"}},
                   "stddev": ALLOWED_TIMING.replace("> 0", ">= 0"), "iqr": ALLOWED_TIMING.replace("> 0", ">= 0"),
                   "rounds": f"allowed a whole number from 1 up to {MAX_COUNT}",
                   "iterations": f"allowed a whole number from 1 up to {MAX_COUNT}"}


def problem(error: dict, data: Any = None, field_rules: dict[str, str] | None = None,
            entries: str = "benchmarks") -> str:
    """One pydantic error as 'PATH is VALUE: allowed ...' (or the validator's own sentence); an
    entry's path names the entry too: 'benchmarks[3] (its fullname) stats.median is ...'.
    ``field_rules``: field name -> what it allows (default: the run file's); ``entries``: the
    list whose items are named."""
    path = field_path(error["loc"])
    loc = error["loc"]
    if len(loc) >= 2 and loc[0] == entries and isinstance(loc[1], int):
        items = data.get(entries) if isinstance(data, dict) else None
        entry = items[loc[1]] if isinstance(items, list) and loc[1] < len(items) else None
        name = entry.get("fullname") or entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            shown = name if len(name) <= 120 else name[:117] + "..."
            path = f"{entries}[{loc[1]}] ({shown})" + path[len(f"{entries}[{loc[1]}]"):].replace(".", " ", 1)
    if error["type"] == "value_error":  # a validator's sentence starts with the field's name
        text = str(error["msg"]).removeprefix("Value error, ")
        return (f"{path}{' ' if path.endswith(')') else '.'}{text}" if path else text)
    if error["type"] == "missing":
        return f"{path} is missing: required"
    shown = json.dumps(error.get("input"), default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{path} is {shown}: {_allowed(error, RUN_FIELD_RULES if field_rules is None else field_rules)}"


def first_problem(model: type[BaseModel], data: Any, field_rules: dict[str, str] | None = None,
                  entries: str = "benchmarks") -> str | None:
    """None where ``data`` has ``model``'s declared shape; else its first problem in one line
    (``problem``), with how many more fields have one."""
    try:
        model.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        more = len({field_path(err["loc"]) for err in errors}) - 1
        return problem(errors[0], data, field_rules, entries) + (
            f" (and {more} more problem{'s' * (more > 1)})" if more > 0 else "")
    return None


def validate_run(data: Any) -> str | None:
    """None where ``data`` (a parsed run file) has the declared shape; else its first problem."""
    return first_problem(RunFile, data)
