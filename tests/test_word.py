"""Word in (issue 38): a .docx with tracked changes and a comment reads as its accepted text
(docx2python, with moves fixed up)."""
import pytest
from word_files import TRACKED_ACCEPTED, TRACKED_GONE, write_tracked_docx

pytest.importorskip("docx")
pytest.importorskip("docx2python")

from olifant_mlx.draftmodel.documents import docx_paragraphs  # noqa: E402


def test_tracked_changes_read_as_the_accepted_text_without_comments(tmp_path):
    path = tmp_path / "tracked.docx"
    write_tracked_docx(path)
    got = docx_paragraphs(path.read_bytes())
    assert got == TRACKED_ACCEPTED
    assert not any(gone in p for p in got for gone in TRACKED_GONE)
    import docx2python
    with docx2python.docx2python(str(path)) as raw:        # the check can fail: the raw reader keeps
        assert "old place" in str(raw.body)                  # the text a move took away
