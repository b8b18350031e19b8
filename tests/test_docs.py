"""CPU tier: the README's quickstart and variables, tools/README.md and docs/perf.md agree with the tree."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _read(path: str) -> str:
    return (REPO / path).read_text()


def test_readme_quickstart_is_a_complete_script() -> None:
    readme = _read("README.md")
    section = readme.split("## Quickstart", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    tree = ast.parse(code)  # a syntax error fails here
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}  # fmt: skip
    assigned = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
                for t in ast.walk(target) if isinstance(t, ast.Name)}  # fmt: skip
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    assert used <= imported | assigned | {"print"}, f"undefined names: {used - imported - assigned - {'print'}}"
    assert 'device="cuda"' in code and "double()" in code and "print(" in code


def test_readme_variables_are_read_by_the_code() -> None:
    readme = _read("README.md")
    sources = "\n".join(p.read_text() for p in [*REPO.glob("csrc/**/*.hpp"), *REPO.glob("csrc/**/*.cpp"),
                                                 *REPO.glob("deep_gemm/**/*.py")])  # fmt: skip
    documented = set(re.findall(r"`(DG_[A-Z0-9_]+)", readme))
    assert {"DG_JIT_CACHE_DIR", "DG_PRINT_CONFIGS", "DG_DEBUG_CHECKS"} <= documented
    assert not any(v.startswith(("DG_FP8_GEMM_", "DG_MQA_", "DG_PAGED_MQA_")) for v in documented)
    for variable in documented:
        assert variable in sources, f"the README documents {variable}, which no source reads"


def test_tools_readme_lists_every_tool() -> None:
    listed = set(re.findall(r"^\| `([a-z0-9_]+\.(?:py|sh))", _read("tools/README.md"), re.M))
    present = {p.name for p in (REPO / "tools").iterdir() if p.suffix in (".py", ".sh")}
    assert listed == present


def test_no_run_numbers_in_tools() -> None:
    for path in (REPO / "tools").iterdir():
        assert not re.search(r"\bruns? \d+", path.read_text()), f"{path.name} cites a run number"


def test_perf_md_is_rendered_by_the_bench() -> None:
    perf = _read("docs/perf.md")
    assert perf.startswith("# deep_gemm benchmarks\n")
    headings = re.findall(r"^## (\S+) on (.+)$", perf, re.M)
    assert ("dense", "NVIDIA H200") in headings and ("dense", "NVIDIA H100 80GB HBM3") in headings
    for field in ("- date:", "- GPU:", "- driver:", "- CUDA (PyTorch build):", "- PyTorch:", "- command:"):
        assert perf.count(field) == len(headings), field
