"""fusec.cache: Recent, the in-memory cache of loaded libraries and built kernels, and the
atomic writes of the files fusec keeps."""

import threading

import pytest

from fusec.cache import Recent, atomic_write_text


def test_the_least_recently_used_goes_first():
    recent = Recent(2)
    recent.keep("a", 1)
    recent.keep("b", 2)
    assert recent.get("a") == 1  # now the most recently used
    recent.keep("c", 3)
    assert recent.get("b") is None and recent.get("a") == 1 and recent.get("c") == 3


def test_keeping_a_key_again_replaces_its_value_without_growing():
    recent = Recent(2)
    recent.keep("a", 1)
    recent.keep("a", 2)
    recent.keep("b", 3)
    assert (recent.get("a"), recent.get("b")) == (2, 3)


def test_threads_never_hold_more_than_the_bound():
    recent = Recent(16)

    def work(offset):
        for i in range(2000):
            recent.keep((offset, i), i)
            recent.get((offset, i - 1))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(recent) <= 16


def test_an_atomic_write_onto_a_folder_names_the_folder_and_leaves_no_temporary(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        atomic_write_text(folder, "{}")
    assert info.value.filename == str(folder)  # what the user named, not fusec's temporary file
    assert list(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == []
