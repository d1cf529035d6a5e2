"""Does installing muarl beside verl's GPU stack move anything under it? Asks pip's resolver, installing nothing.

For each verl extra (vllm, sglang) it resolves ``verl[EXTRA]==VERSION`` alone and then together with
``muarl[verl]`` from this checkout (``pip install --dry-run --ignore-installed --report``: metadata only, no GPU
wheels land on disk), and prints the packages whose resolved version differs. The expected answer is that
only muarl itself is added; a stack that does not resolve even alone is reported as such (not muarl's
doing). docs/scale.md records the run.

    python scripts/check_verl_resolution.py [--extras vllm sglang] [--verl 0.9.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def resolve(*requirements: str) -> dict[str, str] | str:
    """The resolved versions by package, or pip's reason when the requirements cannot be resolved."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                               "--report", str(report), *requirements], capture_output=True, text=True)
        if done.returncode != 0:
            return " ".join(line.strip() for line in done.stderr.splitlines() if "depends on" in line or "ERROR" in line)
        return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", nargs="+", default=["vllm", "sglang"])
    parser.add_argument("--verl", default="0.9.1")
    args = parser.parse_args()
    moved = False
    for extra in args.extras:
        alone = resolve(f"verl[{extra}]=={args.verl}")
        if isinstance(alone, str):
            print(json.dumps({"extra": extra, "unresolvable_without_muarl": alone}))
            continue
        together = resolve(f"verl[{extra}]=={args.verl}", f"{ROOT}[verl]")
        if isinstance(together, str):
            print(json.dumps({"extra": extra, "unresolvable_with_muarl": together}))
            moved = True
            continue
        changed = {name: (alone.get(name), version) for name, version in together.items() if alone.get(name) != version and name != "muarl"}
        removed = sorted(set(alone) - set(together))
        moved |= bool(changed or removed)
        print(json.dumps({"extra": extra, "packages": len(alone), "torch": alone.get("torch"), "transformers": alone.get("transformers"),
                          "changed_by_muarl": changed, "removed_by_muarl": removed}))
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
