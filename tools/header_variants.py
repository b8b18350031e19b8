"""Write deep_gemm/include, with some headers replaced, as a tarball for tools/with_old_headers.sh.

Shared by the diagnostic header generators (tools/per_row_diag_headers.py, tools/wg_stagger_diag_headers.py):
each builds the patched text of one or more headers and calls write_include_tarball.
"""

import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read_header(rel: str) -> str:
    """The text of `rel` (a path under the repository root, e.g. deep_gemm/include/deep_gemm/...)."""
    return (ROOT / rel).read_text()


def write_include_tarball(out: Path, replaced: dict[str, str]) -> Path:
    """deep_gemm/include into the gzip tarball `out`, each path in `replaced` with the given text instead."""
    unknown = [rel for rel in replaced if not (ROOT / rel).is_file()]
    if unknown:
        raise FileNotFoundError(f"header_variants: not in the tree: {unknown}")
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(out, "w:gz") as tar:
        for path in sorted((ROOT / "deep_gemm/include").rglob("*")):
            if not path.is_file():
                continue
            rel = str(path.relative_to(ROOT))
            if rel in replaced:
                staged = Path(tmp) / path.name
                staged.write_text(replaced[rel])
                tar.add(staged, arcname=rel)
            else:
                tar.add(path, arcname=rel)
    return out
