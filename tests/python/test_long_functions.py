"""scripts/long_functions.py (the lint check `long-functions`) on small files
whose function lengths are known by construction."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "long_functions", ROOT / "scripts" / "long_functions.py"
)
long_functions = importlib.util.module_from_spec(_spec)
sys.modules["long_functions"] = long_functions  # dataclasses look their module up
_spec.loader.exec_module(long_functions)


def body(n):
    """n statement lines."""
    return "".join(f"  x += {i};\n" for i in range(n))


def found(tmp_path, name, text, max_lines=80):
    path = tmp_path / name
    path.write_text(text)
    return [
        (f.name, f.line, f.length, f.marked)
        for f in long_functions.long_functions([str(path)], max_lines)
    ]


def test_cxx_length_counts_signature_to_closing_brace(tmp_path):
    # 1 signature line + 79 body lines + closing brace = 81 lines.
    text = (
        "namespace fcp {\nint Long(int x) {\n"
        + body(79)
        + "}\nint Short(int x) {\n"
        + body(78)
        + "}\n}\n"
    )
    assert found(tmp_path, "a.cc", text) == [("Long", 2, 81, False)]


def test_cxx_marker_in_the_comment_block_above(tmp_path):
    fn = "int F(int x) {\n" + body(90) + "}\n"
    marked = "// Long because: one table.\n// F fills it.\n" + fn
    assert found(tmp_path, "m.cc", marked) == [("F", 3, 92, True)]
    # A blank line between the comment and the function breaks the block.
    detached = "// Long because: one table.\n\n" + fn
    assert found(tmp_path, "d.cc", detached) == [("F", 3, 92, False)]


def test_cxx_scanner_ignores_braces_in_strings_comments_and_macros(tmp_path):
    text = (
        "#define OPEN {\n"
        "struct S {\n"
        "  int Member() const override {\n" + body(85) + "  }\n"
        "};\n"
        'const char* s = "{ {";  // } {\n'
        "/* { */ int n = 1'000'000;\n"
        "int G(char c = '{') {\n" + body(2) + "  if (c) {\n" + body(90) + "  }\n}\n"
    )
    got = found(tmp_path, "s.h", text)
    assert [(name, length) for name, _, length, _ in got] == [("Member", 87), ("G", 96)]


def test_cxx_constructor_initializer_list_and_lambda_inside(tmp_path):
    text = "Foo::Foo(int a) : a_(a), b_{2} {\n  auto f = [&](int y) {\n" + body(85) + "  };\n}\n"
    assert found(tmp_path, "c.cc", text) == [("Foo::Foo", 1, 89, False)]


def test_python_functions_and_marker_above_decorators(tmp_path):
    text = (
        "# Long because: a flat table.\n"
        "@staticmethod\n"
        "def marked():\n" + "    x = 1\n" * 85 + "\n\n"
        "def unmarked():\n" + "    x = 1\n" * 80 + "\n\n"
        "def short():\n" + "    x = 1\n" * 79
    )
    got = found(tmp_path, "p.py", text)
    assert got == [("marked", 3, 86, True), ("unmarked", 91, 81, False)]


def test_main_fails_only_on_unmarked(tmp_path, capsys):
    (tmp_path / "ok.cc").write_text("// Long because: x.\nint F() {\n" + body(100) + "}\n")
    assert long_functions.main([str(tmp_path)]) == 0
    (tmp_path / "bad.cc").write_text("int G() {\n" + body(100) + "}\n")
    assert long_functions.main([str(tmp_path)]) == 1
    assert "bad.cc:1: G is 102 lines" in capsys.readouterr().out
