"""The fsdp-plan examples in a document against the tool: every ```-block whose first line is
`$ fsdp-plan ...` (continued by trailing backslashes) is run from the source tree with the built
tool, and the lines the document shows must be the first lines the tool prints (a last line
`...` marks an excerpt; a sweep's table may be shown in part). Prints one line per example and
exits 1 if any differs, showing the first difference.
Usage: check_doc_examples.py <fsdp-plan> <source dir> <doc.md>..."""
import pathlib
import shlex
import subprocess
import sys


def examples(text):
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines) and lines[i + 1].startswith("$ fsdp-plan"):
            j = i + 1
            command = lines[j][2:]
            while command.endswith("\\"):
                j += 1
                command = command[:-1] + " " + lines[j].strip()
            k = j + 1
            while not lines[k].startswith("```"):
                k += 1
            shown = lines[j + 1:k]
            if shown and shown[-1] == "...":
                shown = shown[:-1]
            yield i + 2, command, shown
            i = k
        i += 1


def main():
    tool, source, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    for doc in docs:
        for line, command, shown in examples(pathlib.Path(doc).read_text()):
            argv = [tool] + shlex.split(command)[1:]
            run = subprocess.run(argv, cwd=source, capture_output=True, text=True)
            got = run.stdout.splitlines()
            where = f"{doc}:{line}"
            if run.returncode != 0:
                print(f"FAIL {where}: exit {run.returncode}: {run.stderr.strip()}")
                failed += 1
                continue
            for n, want in enumerate(shown):
                have = got[n] if n < len(got) else "(no line)"
                if want.rstrip() != have.rstrip():
                    print(f"FAIL {where}: line {n + 1} of the output differs\n  doc:  {want}\n  tool: {have}")
                    failed += 1
                    break
            else:
                print(f"ok   {where}: {len(shown)} lines")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
