"""The monitoring deliverables under deploy/: the Prometheus alert rules pass `promtool check
rules` and their unit tests (`promtool test rules`, synthetic series on both sides of every
alert), the example Prometheus configuration passes `promtool check config`, the Grafana
dashboard and its provisioning files are well formed, and every metric and label that a panel,
a template variable, a legend or a rule names exists on the /metrics page of a real Agent that
watched a real simulated job (through the real plugin) hang.

Metric names are compared with the names of the samples the page carries, as Prometheus stores
them: a counter family `comminsight_ops` is the series `comminsight_ops_total`, a histogram
`comminsight_op_latency_seconds` the series `..._bucket`, `..._sum` and `..._count`, so no
suffix is stripped or guessed."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import signal
import subprocess
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from agent_processes import agent_process, api_get, wait_for
from e2e_sims import e2e_sim_config
from ports import free_port
from prometheus_client.parser import text_string_to_metric_families
from waiting import WaitTimeout, wait_until

from comminsight.sim import run_simulation
from comminsight_gen.models.hang_report_v1 import Verdict

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "comminsight-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "comminsight-alerts.test.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "comminsight-dashboard.json"
PROVISIONING = DEPLOY / "grafana" / "provisioning"
REQUIRED_ALERTS = {
    "CommInsightHangSuspected",
    "CommInsightStraggler",
    "CommInsightBandwidthDrop",
    "CommInsightRecordsDropped",
    "CommInsightAgentDown",
}

# Labels a scrape adds to every series of a target.
TARGET_LABELS = frozenset({"job", "instance"})
# Series Prometheus makes itself, not an Agent: their labels.
PROMETHEUS_SERIES = {"up": TARGET_LABELS}
# A verdict a rule or panel names need not occur in the one hang the page saw: the
# hang-report protocol's enum is its set.
LABEL_VALUES = {"verdict": frozenset(v.value for v in Verdict)}
GRAFANA_VARIABLES = frozenset({"__rate_interval", "__interval", "__range"})


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is required (Debian's prometheus package: scripts/install-debian-packages.sh)"
        )
    return path


def run_promtool(*args: str) -> None:
    proc = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- a small PromQL reader: which metrics, labels and label values an expression names ----

FUNCTIONS = frozenset(
    "abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min "
    "count_over_time day_of_month day_of_week day_of_year days_in_month delta deriv exp floor "
    "histogram_quantile holt_winters hour idelta increase irate label_join label_replace "
    "last_over_time ln log10 log2 max_over_time min_over_time minute month predict_linear "
    "present_over_time quantile_over_time rate resets round scalar sgn sort sort_desc sqrt "
    "stddev_over_time stdvar_over_time sum_over_time time timestamp vector year".split()
)
AGGREGATIONS = frozenset(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile".split()
)
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = LABEL_LIST_KEYWORDS | {"and", "or", "unless", "offset", "bool", "atan2"}
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w.]))
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){}\[\],:@])
    """,
    re.X,
)


@dataclass
class Selector:
    metric: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)  # (label, op, value)


@dataclass
class Refs:
    """What one expression names."""

    selectors: list[Selector] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)  # by/without/on/ignoring/group_x labels
    defined: set[str] = field(default_factory=set)  # labels label_replace/label_join write
    variables: set[str] = field(default_factory=set)  # Grafana variables ($name)

    @property
    def metrics(self) -> set[str]:
        return {s.metric for s in self.selectors}


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read {expr[pos : pos + 20]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def _unquote(text: str) -> str:
    return text[1:-1]


def _variable_name(text: str) -> str:
    return text.strip("$[]{}").split(":")[0]


def promql_refs(expr: str) -> Refs:
    """The metric names, label matchers, grouping labels, labels written by label_replace and
    Grafana variables of a PromQL expression. Raises ValueError on a function it does not know
    (a misspelt function would otherwise read as a metric name)."""
    toks = tokens(expr)
    refs = Refs()
    calls: list[list] = []  # per open parenthesis: [function or None, argument index]
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "variable":
            refs.variables.add(_variable_name(text))
        elif kind == "ident" and text in LABEL_LIST_KEYWORDS and following == "(":
            j = i + 2
            while toks[j][1] != ")":
                if toks[j][0] == "ident":
                    refs.grouping.add(toks[j][1])
                j += 1
            i = j
        elif kind == "ident" and (text in KEYWORDS or text.lower() in ("inf", "nan")):
            pass
        elif kind == "ident" and following == "(":
            if text not in FUNCTIONS | AGGREGATIONS:
                raise ValueError(f"unknown function {text!r} in {expr!r}")
            calls.append([text, 0])
            i += 1
        elif kind == "ident" and text in AGGREGATIONS and following in ("by", "without"):
            pass  # `sum by (x) (...)`: the label list comes before its parenthesis
        elif kind == "ident":
            selector = Selector(text)
            refs.selectors.append(selector)
            if following == "{":
                i = _matchers(toks, i + 2, selector, refs)
        elif text == "(":
            calls.append([None, 0])
        elif text == ")":
            calls.pop()
        elif text == "," and calls:
            calls[-1][1] += 1
        elif kind == "string" and calls and calls[-1][0] in ("label_replace", "label_join"):
            if calls[-1][1] == 1:  # the destination label
                refs.defined.add(_unquote(text))
        elif text == "{":
            raise ValueError(f"a selector without a metric name in {expr!r}")
        i += 1
    return refs


def _matchers(toks, i: int, selector: Selector, refs: Refs) -> int:
    """Reads `label op "value", ...}` from toks[i]; the index of the closing brace."""
    while toks[i][1] != "}":
        if toks[i][1] == ",":
            i += 1
            continue
        label, op, value = toks[i][1], toks[i + 1][1], _unquote(toks[i + 2][1])
        selector.matchers.append((label, op, value))
        refs.variables.update(_variable_name(v) for v in re.findall(r"\$\{?\w+", value))
        i += 3
    return i


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""))


def template_labels(text: str) -> set[str]:
    return set(re.findall(r"\$labels\.(\w+)", text))


# ---- what the deliverables name ---------------------------------------------------------


@dataclass
class Use:
    where: str  # "panel 'Throughput by communicator'", "rule CommInsightStraggler"
    refs: Refs
    labels_shown: set[str] = field(default_factory=set)  # legend or annotation labels
    extra_label: str | None = None  # the label of label_values(selector, label)


def load_rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_uses(dashboard: dict) -> list[Use]:
    uses = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            uses.append(
                Use(
                    f"panel {panel['title']!r} target {target['refId']}",
                    promql_refs(target["expr"]),
                    legend_labels(target.get("legendFormat", "")),
                )
            )
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["definition"].strip())
        assert m, f"variable {variable['name']}: not a label_values(selector, label) query"
        uses.append(Use(f"variable {variable['name']}", promql_refs(m[1]), extra_label=m[2]))
    return uses


def rule_uses(rules: list[dict]) -> list[Use]:
    uses = []
    for rule in rules:
        name = rule.get("alert") or rule["record"]
        shown = set()
        for text in rule.get("annotations", {}).values():
            shown |= template_labels(text)
        uses.append(Use(f"rule {name}", promql_refs(rule["expr"]), shown))
    return uses


def recorded_labels(rules: list[dict]) -> dict[str, set[str]]:
    """Recording rules' series and their labels (those their expression groups by)."""
    return {r["record"]: promql_refs(r["expr"]).grouping for r in rules if "record" in r}


# ---- the checks ---------------------------------------------------------------------------


@dataclass
class Page:
    """The samples of one or more /metrics pages: name -> label name -> values seen."""

    labels: dict[str, dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )

    def add(self, text: str) -> None:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                seen = self.labels[sample.name]  # a sample without labels is seen too
                for label, value in sample.labels.items():
                    seen[label].add(value)


def _literal_values(op: str, value: str) -> list[str]:
    """The values a matcher names outright: one for = and !=, the alternatives of a regex
    made only of alternatives; none for a pattern or a variable."""
    if "$" in value:
        return []
    if op in ("=", "!="):
        return [value]
    if re.fullmatch(r"[\w:.-]+(\|[\w:.-]+)*", value):
        return value.split("|")
    return []


def problems(uses: list[Use], page: Page, recorded: dict[str, set[str]]) -> list[str]:
    """Every metric, label and label value the uses name that the page does not have."""
    out = []
    for use in uses:
        available = set(TARGET_LABELS) | use.refs.defined
        for selector in use.refs.selectors:
            if selector.metric in recorded:
                labels = recorded[selector.metric]
                values = None
            elif selector.metric in PROMETHEUS_SERIES:
                labels = PROMETHEUS_SERIES[selector.metric]
                values = None
            elif selector.metric in page.labels:
                values = page.labels[selector.metric]
                labels = set(values)
            else:
                out.append(f"{use.where}: no metric {selector.metric!r} on the /metrics page")
                continue
            available |= labels
            for label, op, value in selector.matchers:
                if label in TARGET_LABELS:
                    continue
                if label not in labels:
                    out.append(f"{use.where}: {selector.metric} has no label {label!r}")
                    continue
                known = LABEL_VALUES.get(label) or (values or {}).get(label)
                if known is None:
                    continue
                for v in _literal_values(op, value):
                    if v not in known:
                        out.append(f"{use.where}: {selector.metric}{{{label}}} is never {v!r}")
        for label in use.refs.grouping | use.labels_shown:
            if label not in available:
                out.append(f"{use.where}: no metric it names has the label {label!r}")
        if use.extra_label is not None and use.extra_label not in available:
            out.append(f"{use.where}: no metric it names has the label {use.extra_label!r}")
    return out


# ---- promtool ----------------------------------------------------------------------------


def test_rules_pass_promtool_check():
    run_promtool("check", "rules", str(RULES))


def test_rules_pass_their_unit_tests():
    run_promtool("test", "rules", str(RULE_TESTS))


def test_example_prometheus_config_passes_promtool_check():
    run_promtool("check", "config", str(PROMETHEUS_CONFIG))


def hung_job_rule_test(rules: Path, nodes: int = 128, per_node: int = 8) -> dict:
    """A promtool test of a hang of nodes x per_node ranks: every rank's oldest op in flight
    past the threshold (series at metrics level rank, the most a fleet could send), every
    node Agent holding an inconclusive incident (it waits for ranks on other nodes), the
    culprit's node and the master holding the conclusive one (rank 1013 never joined)."""
    series = []
    for node in range(nodes):
        host = f"node-{node:03d}"
        instance = f"{host}:19102"
        for local in range(per_node):
            rank = node * per_node + local
            series.append(
                {
                    "series": "comminsight_inflight_age_seconds{"
                    f'job="comminsight-agent", instance="{instance}", job_id="job-big", '
                    f'host="{host}", rank="{rank}", local_rank="{local}", gpu="{local}", '
                    f'UUID="", comm="default_pg:0"' + "}",
                    "values": "0+60x10",
                }
            )
        series.append(
            {
                "series": "comminsight_incident_open{"
                f'job="comminsight-agent", instance="{instance}", incident_id="inc-{node}", '
                'job_id="job-big", verdict="inconclusive", comm="default_pg:0", root_rank="", '
                'root_host=""}',
                "values": "_ _ 1x8",
            }
        )
    culprit = {"root_rank": "1013", "root_host": "node-126"}
    for instance in ("node-126:19102", "master:19102"):
        series.append(
            {
                "series": "comminsight_incident_open{"
                f'job="comminsight-agent", instance="{instance}", incident_id="inc-{instance}", '
                'job_id="job-big", verdict="rank_not_joined", comm="default_pg:0", '
                'root_rank="1013", root_host="node-126"}',
                "values": "_ _ 1x8",
            }
        )
    suspected = {"severity": "critical", "job_id": "job-big"}
    diagnosed = {
        "severity": "critical",
        "job_id": "job-big",
        "verdict": "rank_not_joined",
        "comm": "default_pg:0",
        **culprit,
    }

    def annotations(labels: dict) -> dict:
        if "verdict" not in labels:
            return {
                "summary": "Job job-big: an operation has been in flight for 7m 0s",
                "description": "The oldest NCCL operation in flight in job job-big has not "
                "completed for longer than the hang threshold (300 s, the default of "
                "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S). The Agents' diagnosis names the rank "
                "to blame: `comminsight incidents`, or the CommInsightHangDiagnosed alert.",
            }
        return {
            "summary": "Job job-big: rank_not_joined on default_pg:0, rank 1013 on node-126 "
            "to blame",
            "description": "CommInsight diagnosed a hang of job job-big (rank_not_joined) on "
            "communicator default_pg:0; the root cause is rank 1013 on node-126. The incident "
            "carries the operation, every waiting rank and the evidence: `comminsight "
            "incidents`.",
        }

    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "7m",
                        "alertname": "CommInsightHangSuspected",
                        "exp_alerts": [
                            {"exp_labels": suspected, "exp_annotations": annotations(suspected)}
                        ],
                    },
                    {
                        "eval_time": "7m",
                        "alertname": "CommInsightHangDiagnosed",
                        "exp_alerts": [
                            {"exp_labels": diagnosed, "exp_annotations": annotations(diagnosed)}
                        ],
                    },
                ],
            }
        ],
    }


def test_a_hang_of_1024_ranks_is_one_suspected_and_one_diagnosed_alert(tmp_path):
    """One fault of a 1,024-rank job: 1,024 ranks waiting, 128 node Agents and a master
    holding incidents of it; one CommInsightHangSuspected and one CommInsightHangDiagnosed
    (promtool fails a test on any alert it does not expect)."""
    case = hung_job_rule_test(RULES)
    assert sum(", rank=" in s["series"] for s in case["tests"][0]["input_series"]) == 1024
    test_file = tmp_path / "hang-1024.test.yml"
    test_file.write_text(yaml.safe_dump(case, sort_keys=False))
    run_promtool("test", "rules", str(test_file))


def test_every_alert_says_how_long_how_bad_and_what():
    rules = load_rules()
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert REQUIRED_ALERTS <= set(alerts), REQUIRED_ALERTS - set(alerts)
    for name, rule in alerts.items():
        assert "for" in rule, name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = defaultdict(set)  # alert -> {"fires", "quiet"}
    for case in tests:
        for check in case.get("alert_rule_test", []):
            tested[check["alertname"]].add("fires" if check["exp_alerts"] else "quiet")
    for name in alerts:
        assert tested[name] == {"fires", "quiet"}, f"{name} is tested {sorted(tested[name])}"


# ---- the dashboard ------------------------------------------------------------------------


def test_dashboard_is_provisionable_and_well_formed():
    dashboard = load_dashboard()
    assert dashboard["uid"] == "comminsight-overview" and dashboard["title"]
    assert "id" not in dashboard or dashboard["id"] is None  # Grafana assigns it
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "job_id", "host", "comm"} <= set(variables)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), ids
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"] == panel["datasource"], panel["title"]
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert len(rows) == len(set(rows)) == 6, rows
    for use in dashboard_uses(dashboard):
        unknown = use.refs.variables - set(variables) - GRAFANA_VARIABLES
        assert not unknown, f"{use.where} uses undefined variables {unknown}"


def test_the_readme_lists_every_panel_and_alert():
    readme = (DEPLOY / "README.md").read_text()
    titles = [p["title"] for p in load_dashboard()["panels"] if p["type"] != "row"]
    alerts = [r["alert"] for r in load_rules() if "alert" in r]
    missing = [name for name in titles + alerts if f"| {name} |" not in readme]
    assert not missing, missing


def test_provisioning_files_parse():
    dashboards = yaml.safe_load((PROVISIONING / "dashboards.yaml").read_text())
    assert dashboards["apiVersion"] == 1
    (provider,) = dashboards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    datasources = yaml.safe_load((PROVISIONING / "datasources.yaml").read_text())
    assert datasources["apiVersion"] == 1
    assert [d["type"] for d in datasources["datasources"]] == ["prometheus"]


# ---- the PromQL reader itself -------------------------------------------------------------


def test_the_promql_reader_tells_metrics_from_functions_labels_and_variables():
    refs = promql_refs(
        'histogram_quantile(0.99, sum by (comm, le) (rate(x_bucket{job_id=~"$job_id", '
        'op_type="AllReduce"}[$__rate_interval]))) / on (comm) group_left '
        'sum without (rank) (label_replace(y_total offset 1h, "reason", "a", "", "")) > 0.5'
    )
    assert refs.metrics == {"x_bucket", "y_total"}
    assert refs.selectors[0].matchers == [
        ("job_id", "=~", "$job_id"),
        ("op_type", "=", "AllReduce"),
    ]
    assert refs.grouping == {"comm", "le", "rank"}
    assert refs.defined == {"reason"}
    assert refs.variables == {"job_id", "__rate_interval"}
    assert promql_refs("avg_over_time(a:b:c[6h] offset 30m) < Inf").metrics == {"a:b:c"}
    with pytest.raises(ValueError, match="unknown function 'rte'"):
        promql_refs("rte(x_total[5m])")


def test_a_name_label_or_value_the_page_lacks_is_a_problem():
    page = Page()
    page.add(
        "# TYPE comminsight_ops counter\n"
        'comminsight_ops_total{comm="c",op_type="AllReduce"} 3\n'
        "# TYPE comminsight_hangs_open gauge\n"
        'comminsight_hangs_open{verdict="process_died"} 1\n'
    )
    use = Use(
        "panel",
        promql_refs(
            'sum by (comm, rank) (rate(comminsight_ops_total{op_type="Allreduce"}[5m])) '
            '+ comminsight_op_total + comminsight_hangs_open{verdict="straggler", x="1"}'
        ),
        {"op_type", "node"},
    )
    assert sorted(problems([use], page, {})) == sorted(
        [
            "panel: comminsight_ops_total{op_type} is never 'Allreduce'",
            "panel: no metric 'comminsight_op_total' on the /metrics page",
            "panel: comminsight_hangs_open has no label 'x'",
            "panel: no metric it names has the label 'rank'",
            "panel: no metric it names has the label 'node'",
        ]
    )


# ---- against a real Agent ----------------------------------------------------------------


# series the hang and the healthy job's Steps must have given samples, with these labels
LABELED_ON_THE_PAGE = (
    ("comminsight_incidents_open", "verdict"),
    ("comminsight_incident_open", "root_rank"),
    ("comminsight_inflight_age_seconds", "comm"),
    ("comminsight_rank_op_seconds_total", "rank"),
    ("comminsight_step_duration_seconds_count", "job_id"),
)


@pytest.fixture(scope="module")
def hung_job_page(plugin, tmp_path_factory):
    """The union of the /metrics pages a real `comminsight-agent` served while a simulated DDP
    job ran through the real plugin and hung (rank 1 skips op 5, its peers wait in it until the
    simulator gives up): op series, ops in flight, hang reports and incidents, the Semantic
    Engine's series, drop counters and the Agent's process metrics."""
    home = tmp_path_factory.mktemp("deploy-metrics")
    listen = f"127.0.0.1:{free_port()}"
    agent = agent_process(home, COMMINSIGHT_AGENT_LISTEN=listen)
    page = Page()
    try:
        wait_for(home / "fifos" / "hang-events.fifo")  # it holds the lock and the FIFO
        api_get(listen, "/api/v1/health")
        # a healthy job first (its Steps: the step-time series), then one that hangs
        healthy = e2e_sim_config(plugin, home, (), steps=8)
        hung = dataclasses.replace(
            e2e_sim_config(plugin, home, ("skip:rank=1,op=5",), steps=3), hang_hold_s=5.0
        )
        for config in (healthy, hung):
            result = {}
            sim = threading.Thread(
                target=lambda c=config, out=result: out.update(sim=run_simulation(c))
            )
            sim.start()

            def scraped_to_the_end(sim=sim) -> bool:  # pages all along the run
                running = sim.is_alive()
                page.add(api_get(listen, "/metrics").text)
                return not running

            wait_until(scraped_to_the_end, 300, "the end of the run")
            sim.join()
            assert not result["sim"].errors, result["sim"].errors
        # after the runs, until the pages hold what the test looks for; should that never
        # come, the test names what is missing
        rules = load_rules()
        uses = dashboard_uses(load_dashboard()) + rule_uses(rules)
        recorded = recorded_labels(rules)

        def complete() -> bool:
            page.add(api_get(listen, "/metrics").text)
            return all(
                name in page.labels and page.labels[name].get(label)
                for name, label in LABELED_ON_THE_PAGE
            ) and not problems(uses, page, recorded)

        try:
            wait_until(complete, 60, "every metric the dashboard and rules name")
        except WaitTimeout:
            pass
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    return page


@pytest.mark.slow
def test_every_metric_the_dashboard_and_rules_name_is_on_a_real_page(hung_job_page):
    rules = load_rules()
    uses = dashboard_uses(load_dashboard()) + rule_uses(rules)
    assert not problems(uses, hung_job_page, recorded_labels(rules))
    # the hang happened on the page: the series the hang panels and alerts read had samples
    for name, label in LABELED_ON_THE_PAGE:
        assert hung_job_page.labels[name][label], (name, label)


@pytest.mark.slow
def test_the_hung_jobs_incident_series_names_the_rank_that_skipped_the_op(hung_job_page):
    """rank 1 skipped op 5 (the hung run's fault): the incident series the alert pages from
    names it as the root, with its host and communicator."""
    labels = hung_job_page.labels["comminsight_incident_open"]
    assert "1" in labels["root_rank"], labels
    # it waits outside NCCL while the others wait in op 5
    assert labels["verdict"] <= {"rank_not_joined", "stuck_outside_nccl"}, labels
    assert all(labels["comm"]) and all(labels["root_host"]), labels
