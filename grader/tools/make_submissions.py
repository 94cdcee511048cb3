#!/usr/bin/python3
"""Makes N varied submissions of a lab for timing `mls-grader grade --batch`.

Each submission holds the lab's student files (lab.json "student_files"), each one either the
reference solution (from the repository) or the handout's stub (from a tree written by
`mls-grader handout --lab N --out DIR`), chosen per submission and file (every fourth submission
holds only solutions, every thirteenth only stubs); every file gets a comment
naming its submission (so no two submissions are byte-identical), and every tenth submission has
a compile error in one file.

  mls-grader handout --lab 1 --out /tmp/h1
  grader/tools/make_submissions.py --lab-dir lab1_tensor --handout /tmp/h1 --out /tmp/subs --n 50
"""
import argparse
import json
import pathlib
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[2]), help="repository root")
    ap.add_argument("--lab-dir", required=True, help="the lab's folder, e.g. lab1_tensor")
    ap.add_argument("--handout", required=True, help="a handout tree of the lab (mls-grader handout)")
    ap.add_argument("--out", required=True, help="folder to create the submissions in")
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args()
    root, handout, out = pathlib.Path(a.root), pathlib.Path(a.handout), pathlib.Path(a.out)
    files = json.loads((root / a.lab_dir / "lab.json").read_text())["student_files"]
    for i in range(a.n):
        sub = out / f"student{i:03d}"
        for j, rel in enumerate(files):
            stub = ((i * 7 + j * 3) % 5 == 0 and i % 4 != 0) or i % 13 == 12
            text = ((handout if stub else root) / rel).read_text()
            text += f"\n// submission {i}, file {j}: {'stub' if stub else 'solution'}\n"
            if i % 10 == 9 and j == len(files) - 1:
                text += "this line does not compile;\n"
            dst = sub / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(text)
    print(f"wrote {a.n} submissions of {len(files)} files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
