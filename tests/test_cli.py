"""python -m matchbox: `show FILE.py:FUNCTION` prints the @batch rewrite of
plain and decorated functions and methods; errors are one clear line with
exit status 1; `--help` lists the commands."""
import re
import subprocess
import sys

import pytest

from matchbox.cli import main

SOURCE = '''
import matchbox

def countdown(x):
    while x > 0:
        x = x - 1
    return x

@matchbox.batch
def decorated(x):
    if x > 0:
        x = -x
    return x

class Model:
    @matchbox.batch
    def forward(self, x):
        for x_t in x.unbind(1):
            x = x_t
        return x

    @staticmethod
    def helper(x):
        return x if x > 0 else -x

def generator(x):
    while x > 0:
        yield x

not_a_function = 3

if __name__ == "__main__":
    raise SystemExit("the main block must not run")
'''


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "mymodel.py"
    path.write_text(SOURCE)
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name,construct", [
    ("countdown", "_mb.while_loop("),          # not decorated in the file
    ("decorated", "_mb.if_true("),             # already @batch
    ("Model.forward", "_mb.step_loop("),       # a method
    ("Model.helper", "_mb.if_exp("),           # a staticmethod
])
def test_show_prints_the_rewrite(capsys, model_file, name, construct):
    code, out, err = run(capsys, "show", f"{model_file}:{name}")
    assert code == 0 and err == ""
    assert construct in out and out.startswith("def ")
    compile(out, "<rewrite>", "exec")  # the printed rewrite is valid Python


def test_show_a_module_by_name(capsys):
    code, out, _ = run(capsys, "show", "examples.n_expansions:NExpansions.n_expansions")
    assert code == 0 and "_mb.while_loop(" in out and "_mb.aug_assign(unconnected, '-='" in out


@pytest.mark.parametrize("target,message", [
    ("{dir}/missing.py:f", r"no such file: .*missing\.py"),
    ("{file}:nope", r"mymodel\.py has no 'nope' \(functions there: Model\.forward, Model\.helper, countdown, decorated, generator\)"),
    ("{file}:Model.nope", r"Model in .*mymodel\.py has no 'nope'"),
    ("{file}:not_a_function", r"not_a_function in .* is a int, not a function"),
    ("{file}:generator", r"@batch cannot rewrite generator: .*generator \(yield\).*mymodel\.py"),
    ("{file}", r"expected FILE\.py:FUNCTION or module:FUNCTION"),
    ("no_such_module_xyz:f", r"no module named 'no_such_module_xyz'"),
])
def test_errors_are_one_clear_line(capsys, model_file, target, message):
    target = target.format(dir=model_file.parent, file=model_file)
    code, out, err = run(capsys, "show", target)
    assert code == 1 and out == ""
    assert err.startswith("matchbox show: error: ")
    assert re.search(message, err), err


def test_import_errors_are_reported(capsys, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_package_xyz\n")
    code, _, err = run(capsys, "show", f"{broken}:f")
    assert code == 1 and "importing" in err and "no_such_package_xyz" in err
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    code, _, err = run(capsys, "show", f"{bad}:f")
    assert code == 1 and "syntax error at" in err and "bad.py:1" in err


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "COMMAND" in out and "show" in out and "print the @batch rewrite" in out
    with pytest.raises(SystemExit) as e:
        main([])  # no command: an argparse usage error
    assert e.value.code == 2 and "required: COMMAND" in capsys.readouterr().err


def test_python_dash_m_matchbox(model_file):
    """The real entry point (one subprocess: starting Python and torch is slow)."""
    shown = subprocess.run([sys.executable, "-m", "matchbox", "show", f"{model_file}:countdown"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("def countdown(x):") and "_mb.while_loop(" in shown.stdout
