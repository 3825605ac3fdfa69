"""numba's cached code of the package is dropped when a source changed, kept while none did."""
from pardec_fairseq.decoding.compiled_cache import STAMP, drop_stale_compiled_code


def test_cached_code_is_dropped_when_any_source_changed_and_kept_otherwise(tmp_path):
    (tmp_path / "kernels.py").write_text("def product(): pass\n")
    (tmp_path / "drafters").mkdir()
    (tmp_path / "drafters" / "head.py").write_text("def draft(): pass\n")
    caches = [tmp_path / "__pycache__" / "kernels.product-1.py311.nbi",
              tmp_path / "drafters" / "__pycache__" / "head.draft-1.py311.1.nbc"]
    bytecode = tmp_path / "__pycache__" / "kernels.cpython-311.pyc"

    def write_caches():
        for path in caches + [bytecode]:
            path.parent.mkdir(exist_ok=True)
            path.write_text("compiled")

    write_caches()
    drop_stale_compiled_code(tmp_path)  # no stamp yet: the caches' sources are unknown
    assert not any(path.exists() for path in caches) and bytecode.exists()
    assert (tmp_path / "__pycache__" / STAMP).exists()
    write_caches()
    drop_stale_compiled_code(tmp_path)  # the same sources: kept
    assert all(path.exists() for path in caches)
    (tmp_path / "kernels.py").write_text("def product(): return 1\n")  # only the callee's file changed
    drop_stale_compiled_code(tmp_path)
    assert not any(path.exists() for path in caches)


def test_a_cache_folder_that_cannot_be_written_is_no_error(tmp_path):
    (tmp_path / "kernels.py").write_text("def product(): pass\n")
    (tmp_path / "__pycache__").write_text("not a folder")  # as unwritable as a read-only install, even for root
    drop_stale_compiled_code(tmp_path)
    assert (tmp_path / "__pycache__").read_text() == "not a folder"
