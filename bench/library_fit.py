"""Whether libraries could replace hand-written code: the config's value coercion (pydantic's
`TypeAdapter` in lax mode, cattrs' `structure`) against the contract `config._coerce` keeps
(its error messages are pinned by tests/test_config.py); their import cost; and accelerate's
`gather_object` / `pad_across_processes` under the project's own torchrun process group
(2 gloo processes), against `Cluster.gather_lists`.

    python bench/library_fit.py          # needs pydantic, cattrs, tomli-w and accelerate installed

Prints markdown tables (docs/implementation_details.md, "Libraries considered").
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Literal, Optional

ROOT = Path(__file__).resolve().parents[1]
# (field type, raw value as a TOML file or an override gives it)
CASES = [(int, "3"), (int, "3.0"), (int, True), (bool, "yes"), (float, "inf"), (Optional[float], "none"),
         (Optional[int], ""), (Literal["k1", "k3"], "k2"), (str, 3)]
GATHER = textwrap.dedent("""
    import json, sys, torch, torch.distributed as dist
    sys.path.insert(0, {src!r})
    from rlhflab.distributed import Cluster
    ours = Cluster.from_environment()  # the project's own gloo process group
    from accelerate import PartialState
    from accelerate.utils import gather_object, pad_across_processes
    rows = torch.zeros(5 + 2 * ours.rank, 1)  # unequal shares: 5 and 7 rows
    print(json.dumps({{"rank": ours.rank, "accelerate_processes": PartialState().num_processes,
                      "padded_rows": pad_across_processes(rows, dim=0).shape[0],
                      "gather_object": len(gather_object([ours.rank])), "ours": len(ours.gather_lists([ours.rank]))}}))
    dist.destroy_process_group()
""")


def outcome(convert, raw, hint) -> str:
    try:
        return repr(convert(raw, hint))
    except Exception as err:  # each library raises its own kind
        return f"error ({type(err).__name__})"


def coercion_table() -> str:
    import cattrs
    from pydantic import TypeAdapter

    from rlhflab.config import _coerce

    lines = ["| field type | raw | rlhflab's contract | pydantic (lax) | cattrs |", "|---|---|---|---|---|"]
    ways = (lambda raw, hint: _coerce("key", raw, hint, ""), lambda raw, hint: TypeAdapter(hint).validate_python(raw),
            cattrs.structure)
    for hint, raw in CASES:
        cells = " | ".join(outcome(way, raw, hint) for way in ways)
        name = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
        lines.append(f"| `{name}` | `{raw!r}` | {cells} |")
    return "\n".join(lines)


def import_ms(module: str) -> float:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                         text=True, check=True).stderr.strip().splitlines()[-1]
    return int(out.split("|")[1]) / 1000


def gathers() -> list[dict]:
    script = Path("/tmp/library_fit_gather.py")
    script.write_text(GATHER.format(src=str(ROOT / "src")))
    torchrun = Path(sys.executable).parent / "torchrun"
    out = subprocess.run([str(torchrun), "--nproc_per_node", "2", str(script)], capture_output=True, text=True,
                         check=True).stdout
    return sorted((json.loads(line) for line in out.splitlines() if line.startswith("{")), key=lambda r: r["rank"])


def main() -> None:
    print(coercion_table())
    print("\n| module | import ms |\n|---|---|")
    for module in ("pydantic", "cattrs", "tomli_w", "accelerate.utils", "rlhflab.doctor"):
        print(f"| `{module}` | {import_ms(module):.0f} |")
    print("\n| rank | accelerate's processes | rows after pad_across_processes | gather_object items | "
          "Cluster.gather_lists items |\n|---|---|---|---|---|")
    for row in gathers():
        print(f"| {row['rank']} | {row['accelerate_processes']} | {row['padded_rows']} | {row['gather_object']} | "
              f"{row['ours']} |")


if __name__ == "__main__":
    main()
