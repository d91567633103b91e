"""The reader every user file goes through: each way a file can be wrong is one error naming the file (and line)."""

import os

import pytest

from cselab.errors import ConfigError, DataError
from cselab.files import MAX_DEPTH, read_json, read_text, read_yaml, shown

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n"


@pytest.mark.parametrize(("content", "reader", "message"), [
    (None, read_text, "{path}: no such file"),
    ("folder", read_text, "{path}: is a folder, not a file"),
    (b"ok\n\xff\xfe bad\n", read_text, "{path}:2: not UTF-8 text (byte 0xff)"),
    ("{\n  \"a\": 1,\n}\n", read_json, "{path}:3: not valid JSON (Expecting property name enclosed in double quotes)"),
    ("[1, 2]", read_json, "{path}: expected a mapping at the top, found a list"),
    ('{"n": ' + "9" * 5000 + "}", read_json, "{path}: a number of 5000 characters (at most 64)"),
    ("[" * 100_000 + "]" * 100_000, read_json, f"{{path}}: nested more than {MAX_DEPTH} levels deep"),
    ('{"a": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", read_json,
     f"{{path}}: nested more than {MAX_DEPTH} levels deep"),
    ("a: [1, 2\nb: 3\n", read_yaml, "{path}:2: not valid YAML"),
    ("- a\n- b\n", read_yaml, "{path}: expected a mapping at the top, found a list"),
    ("", read_yaml, "{path}: expected a mapping at the top, found null"),
    ("just words", read_yaml, "{path}: expected a mapping at the top, found a string"),
    (BOMB, read_yaml, "{path}:2: not valid YAML (aliases (*name) are not allowed)"),
])
def test_each_bad_file_is_one_error_naming_it(tmp_path, content, reader, message):
    path = tmp_path / "file"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(DataError) as caught:
        reader(path)
    assert str(caught.value).startswith(message.format(path=path)) and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its permissions")
def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(DataError, match=r"secret.json: not readable \(permission denied\)"):
        read_json(path)


def test_good_files_read_and_the_error_class_is_the_callers(tmp_path):
    (tmp_path / "a.yaml").write_text("\ufeffkey: [1, 2.5e-5, yes]\n")
    assert read_yaml(tmp_path / "a.yaml") == {"key": [1, 2.5e-5, True]}
    (tmp_path / "a.json").write_text('{"x": [1, -2.5, null]}')
    assert read_json(tmp_path / "a.json") == {"x": [1, -2.5, None]}
    with pytest.raises(ConfigError, match="expected a list at the top"):
        read_json(tmp_path / "a.json", ConfigError, expect=list)


def test_shown_values_are_bounded():
    assert shown("x" * 1000) == repr("x" * 1000)[:57] + "..."
    assert shown(list(range(10**6))) == "<list of 1000000 items>"
    assert shown(0.5) == "0.5"


def test_a_folder_a_failed_block_made_and_left_empty_is_removed_and_any_other_kept(tmp_path):
    from cselab.files import kept_only_if_written

    made = tmp_path / "new"
    with pytest.raises(RuntimeError), kept_only_if_written(made):
        (made / "logs" / "tb").mkdir(parents=True)  # folders only: nothing written
        raise RuntimeError
    assert not made.exists()
    with pytest.raises(RuntimeError), kept_only_if_written(made):
        (made / "logs").mkdir(parents=True)
        (made / "logs" / "log.jsonl").write_text("{}\n")  # a file: what was written is never lost
        raise RuntimeError
    assert (made / "logs" / "log.jsonl").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()  # the user's own empty folder, there before
    with pytest.raises(RuntimeError), kept_only_if_written(mine):
        raise RuntimeError
    assert mine.is_dir()
    with kept_only_if_written(tmp_path / "ok"):  # no failure: whatever it is, it stays
        (tmp_path / "ok").mkdir()
    assert (tmp_path / "ok").is_dir()


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
@pytest.mark.parametrize("damage", ["empty", "truncated", "other bytes"])
def test_every_weights_file_a_folder_holds_is_read_or_named_in_one_line(tmp_path, suffix, damage):
    """By class: a head kept at test, a Condenser's model.pt, any weights file cselab reads itself."""
    import torch
    from safetensors.torch import save_file

    from cselab.errors import ModelError
    from cselab.files import read_tensors

    path = tmp_path / f"weights{suffix}"
    tensors = {"w": torch.arange(6.0).view(2, 3)}
    save_file(tensors, str(path)) if suffix == ".safetensors" else torch.save(tensors, path)
    assert torch.equal(read_tensors(path)["w"], tensors["w"])
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[:len(data) // 2], "other bytes": b"\x00\x01 nothing"}[damage])
    with pytest.raises(ModelError, match=rf"{path}: not a readable weights file \(\w+: "):
        read_tensors(path)
