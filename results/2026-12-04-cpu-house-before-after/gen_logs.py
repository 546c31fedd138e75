"""Generate engine_parse's inspector_logs once, with the after tree, exactly as bench/engine_parse.py does, but kept."""
import sys
from pathlib import Path
from comminsight.sim import SimConfig, run_simulation
ROOT = Path("/tmp/bench-after")
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
out = Path("/tmp/bench-compare/logs")
for name, layers, steps in (("32_layers", 32, 1000), ("12_layers", 12, 1000)):
    home = out / name
    home.mkdir(parents=True, exist_ok=False)
    sim = run_simulation(SimConfig(plugin=str(PLUGIN), home=str(home), workload="tp-pp-dp", ranks=8,
        steps=steps, layers=layers, time_scale=0.005, env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),)))
    if sim.errors:
        sys.exit(f"simulation failed: {sim.errors}")
    print(name, "ok", home / "inspector_logs")
