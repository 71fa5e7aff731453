"""The GPU map as a picture (README's): a row per node, a cell per GPU index, coloured by its
holder and labelled with the job and its pods, drawn from ``slurmbridge gpus -o json``.

    python deploy/demo/gpu_picture.py MAP.json OUT.png

The demo draws it from its own run when ``SLURMBRIDGE_DEMO_PICTURE`` names the PNG.
"""

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

COLOURS = {"native": "#8c8c8c", "placeholder": "#2e8b57", "pod": "#2e8b57",
           "claim": "#2e8b57", "free": "#f2f2f2", "disagreement": "#d62728"}
LEGEND = (("native", "native Slurm job"), ("placeholder", "the bridge's job and its pods"),
          ("free", "free"), ("disagreement", "disagreement"))


def state(gpu: dict[str, Any]) -> str:
    if gpu["problems"]:
        return "disagreement"
    return str(gpu["holders"][0]["kind"]) if gpu["holders"] else "free"


def label(gpu: dict[str, Any]) -> str:
    """The job and who holds it, in a few short lines."""
    lines = []
    for holder in gpu["holders"]:
        if holder["kind"] == "native":
            lines.append(f"job {holder['job_id']}\n{holder['user'] or '?'}")
        else:
            pods = ", ".join(sorted(p or "another namespace" for p in holder["pods"]))
            lines.append(f"job {holder['job_id']}\n" + "\n".join(textwrap.wrap(pods, 14)))
    return "\n".join(lines)


def draw(gpu_map: dict[str, Any], out: Path) -> None:
    nodes = gpu_map["nodes"]
    width = max((g["index"] + 1 for n in nodes for g in n["gpus"]), default=1)
    fig, ax = plt.subplots(figsize=(1.3 * width + 1.6, 1.15 * len(nodes) + 1.2), dpi=100)
    for row, node in enumerate(reversed(nodes)):
        for gpu in node["gpus"]:
            colour = COLOURS[state(gpu)]
            ax.add_patch(Rectangle((gpu["index"], row), 0.94, 0.9, facecolor=colour,
                                   edgecolor="#555555"))
            dark = colour not in (COLOURS["free"],)
            ax.text(gpu["index"] + 0.47, row + 0.45, label(gpu), ha="center", va="center",
                    fontsize=6.5, color="white" if dark else "#333333")
    ax.set_xlim(-0.05, width)
    ax.set_ylim(-0.05, len(nodes))
    ax.set_xticks([i + 0.47 for i in range(width)], [f"GPU {i}" for i in range(width)])
    ax.set_yticks([r + 0.45 for r in range(len(nodes))],
                  [f"{n['node']}\n({n['kube_node'] or '-'})" for n in reversed(nodes)])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(handles=[Patch(facecolor=COLOURS[k], edgecolor="#555555", label=text)
                       for k, text in LEGEND],
              loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4, fontsize=7, frameon=False)
    ax.set_title("Who holds each GPU (slurmbridge gpus)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gpu_picture.py MAP.json OUT.png")
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
