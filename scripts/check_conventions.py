#!/usr/bin/env python3
"""Checks the one naming scheme and layout of the tree (README, "Layout"):

  folder labN_<word>  ->  headers include/mls/<word>/  ->  namespace mls::<word>  ->  library mls_<word>
                                                          (a backend's library mls_<word>_<cuda|mpi|nccl>)

and, per lab:
  - the folder holds CMakeLists.txt, lab.json, README.md, include/mls/<word>/, src/, tests/, bench/,
    tools/, optionally data/ (with a README.md naming the source of its files), and nothing else;
  - lab.json: the keys the grader's manifest parser knows (read from grader/src/manifest.cpp), every
    key it requires, "lab" = N, "dir" = the folder, "test_binary" = mls_labN_tests, every group's
    program a test program of the lab, every benchmark's program one the lab's bench/ builds, and
    every student file present and opening with the student-file line;
  - programs are named by their files (common/cmake/MlsLab.cmake): tools/<name>.cpp -> mls-<name>,
    tools/<name>_oracle.cpp -> mls-<name>-oracle (mls_add_oracle), bench/bench_<name>.cpp ->
    mls_labN_bench_<name> (Google Benchmark), bench/<name>_bench.cpp -> mls-<name>-bench (a driver),
    tools/<backend>/ and bench/<backend>/ alike; <name> lower_snake_case; the lab's CMakeLists.txt
    registers them with mls_add_lab_tools / mls_add_lab_benches / mls_add_oracle only (no
    mls_add_tool, mls_add_bench or add_executable of a tool), its libraries are mls_<word>[_<part>]
    and its other programs test programs mls_labN_*; no two programs of bin/ share a name;
  - namespaces mls::<word>[::...] in include/, src/, tools/, bench/; test helpers in <word>_test;
  - the handout handouts/labN/README.md with a "Your tasks" table.
common/: CMakeLists.txt, README.md (the map), cmake/ (Mls*.cmake), include/mls/common/, src/, tests/, fuzz/; the library
mls_common (alias mls::common); code in namespace mls[::...].
grader/: CMakeLists.txt, README.md (the map), include/mls/grader/, src/, tests/, tools/ (tools/<name>.cpp -> mls-<name>);
the library mls_grader_lib; code in namespace mls::grader[::...].

Prints each violation as "<file>:<line>: <rule>"; exit status 1 if there is any.
Usage: scripts/check_conventions.py [ROOT]
"""
import json
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
problems = []

BACKENDS = ("cuda", "mpi", "nccl")
NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
CODE_EXT = (".hpp", ".cpp", ".cu", ".cuh", ".h")
# Renames another change owns, still to land: the old path is accepted (and said) until then.
PENDING: dict = {}
notes = []


def problem(path, line, text):
    problems.append(f"{os.path.relpath(path, root)}:{line}: {text}")


def rel(path):
    return os.path.relpath(path, root)


def read(path):
    return open(path, encoding="utf-8", errors="replace").read()


def student_line(n):
    return f"// Student file of lab {n}: write the bodies between the SOLUTION markers (mls-grader grades this file)."


def cmake_text(path):
    """The CMake file without its comments (so that a comment naming a call is not a call)."""
    return "\n".join(re.sub(r"#.*", "", line) for line in read(path).splitlines())


NAMESPACE = re.compile(r"^\s*namespace\s+([A-Za-z_][\w:]*(?:::inline\s+\w+)?(?:::\w+)*)\s*(?:\{|=)")


def check_namespaces(folder, allowed, what):
    """Every named namespace starting with mls in `folder`'s code matches the regex `allowed`."""
    for dirpath, _, files in os.walk(folder):
        for f in sorted(files):
            if not f.endswith(CODE_EXT):
                continue
            path = os.path.join(dirpath, f)
            for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = NAMESPACE.match(line)
                if not m:
                    continue
                name = re.sub(r"\s+", " ", m.group(1))
                if name.startswith("mls") and not re.fullmatch(allowed, name):
                    problem(path, i, f"namespace {name}: {what}")


def check_entries(folder, allowed, what):
    """`folder` holds only the entries `allowed` (names; a trailing / marks a folder)."""
    names = {a.rstrip("?") for a in allowed}  # a trailing ? marks an entry that may be missing
    for e in sorted(os.listdir(folder)):
        if e.startswith("."):
            continue
        is_dir = os.path.isdir(os.path.join(folder, e))
        if (e + "/" if is_dir else e) not in names:
            problem(os.path.join(folder, e), 0, f"{what} holds only {', '.join(sorted(allowed))}; not {e}{'/' if is_dir else ''}")
    for a in allowed:
        if a.endswith("?"):
            continue
        if not os.path.exists(os.path.join(folder, a.rstrip("/"))):
            problem(folder, 0, f"{what} has no {a}")


# ---- the manifest's keys, as the grader's parser reads them ------------------------------------------
def manifest_schema():
    """(known, required) key sets per object of lab.json ("top", "group", "benchmark", "build"),
    read from grader/src/manifest.cpp so that this check follows the parser."""
    path = os.path.join(root, "grader", "src", "manifest.cpp")
    if not os.path.exists(path):
        problem(path, 0, "the grader's manifest parser is not there: lab.json keys cannot be checked")
        return None
    src = read(path)
    known = {"top": set(), "group": set(), "benchmark": set(), "build": set()}
    required = {k: set() for k in known}
    m = re.search(r"known\s*=\s*\{([^}]*)\}", src)
    g = re.search(r"known_group\s*=\s*\{([^}]*)\}", src)
    if not m or not g:
        problem(path, 0, "cannot find the manifest parser's sets of known keys (known, known_group)")
        return None
    known["top"] = set(re.findall(r'"([^"]+)"', m.group(1)))
    known["group"] = set(re.findall(r'"([^"]+)"', g.group(1)))

    def obj(var, path_arg):
        if var == "j":
            return "top"
        if var == "g":
            return "group"
        if var == "b":
            return "build" if path_arg.strip() == '"build."' else "benchmark"
        return None

    for fn, var, key, rest in re.findall(r"\b(need|get_string|get_strings|get_number|get_bool)\(c,\s*(\w+),\s*\"(\w+)\"([^;]*)", src):
        args = [a.strip() for a in re.split(r",", rest.split(")")[0])][1:] if rest.startswith(",") else []
        o = obj(var, args[0] if args else "")
        if o is None:
            continue
        known[o].add(key)
        if (fn == "need" or (fn == "get_string" and len(args) == 1) or (fn == "get_strings" and args[-1:] == ["true"])
                or (fn == "get_number" and args[-1:] == ["std::nullopt"])):
            required[o].add(key)
    for k in known.values():
        k.add("$comment")
    return known, required


SCHEMA = manifest_schema()


def check_keys(manifest, obj, kind, where):
    if SCHEMA is None or not isinstance(obj, dict):
        return
    known, required = SCHEMA
    for k in obj:
        if k not in known[kind]:
            problem(manifest, 0, f"{where}'{k}' is not a key the grader's manifest parser knows "
                                 f"(grader/src/manifest.cpp; {kind} keys: {', '.join(sorted(known[kind] - {'$comment'}))})")
    for k in sorted(required[kind]):
        if k not in obj:
            problem(manifest, 0, f"{where}'{k}' is missing (the grader's manifest parser requires it)")


# ---- programs named by their files ---------------------------------------------------------------------
bin_programs = {}  # program of bin/ -> the file it comes from


def add_bin(name, path):
    if name in bin_programs:
        problem(path, 0, f"program {name} is also built from {rel(bin_programs[name])}: programs of bin/ have distinct names")
    else:
        bin_programs[name] = path


def source_files(folder):
    """(path, backend or None) of the .cpp files of `folder` and of its backend subfolders;
    reports any other subfolder."""
    out = []
    if not os.path.isdir(folder):
        return out
    for e in sorted(os.listdir(folder)):
        p = os.path.join(folder, e)
        if os.path.isdir(p):
            if e not in BACKENDS:
                problem(p, 0, f"a subfolder of {os.path.basename(folder)}/ is a backend ({', '.join(BACKENDS)}), not {e}/")
                continue
            for f in sorted(os.listdir(p)):
                if f.endswith(".cpp"):
                    out.append((os.path.join(p, f), e))
        elif e.endswith(".cpp"):
            out.append((p, None))
    return out


def check_tools(lab, n, base, cm_text):
    """tools/ of a lab (or the grader, n = None): returns the oracle drivers' names."""
    tools = os.path.join(base, "tools")
    oracles = {}
    for path, backend in source_files(tools):
        stem = os.path.basename(path)[:-4]
        r = rel(path)
        if r in PENDING:
            notes.append(f"{r}: to be renamed {PENDING[r]} (pending; accepted until then)")
            stem = stem[len("mls_"):]
        elif stem.startswith("mls_"):
            problem(path, 0, f"a tool's file is tools/<name>.cpp without the mls_ prefix (tools/{stem[4:]}.cpp -> mls-{stem[4:].replace('_', '-')})")
            continue
        if not NAME.fullmatch(stem):
            problem(path, 0, f"a tool's file name is lower_snake_case: tools/<name>.cpp, not {os.path.basename(path)}")
            continue
        if stem.endswith("_bench") or stem.startswith("bench_"):
            problem(path, 0, f"a benchmark lives in bench/ (bench/{stem}.cpp), not tools/")
            continue
        program = "mls-" + stem.replace("_", "-")
        if stem.endswith("_oracle"):
            oracles[program] = path
        add_bin(program, path)
    return oracles


def check_benches(lab, n, base):
    """bench/ of a lab: returns (Google Benchmark targets, drivers) -> file."""
    gbench, drivers = {}, {}
    bench = os.path.join(base, "bench")
    if os.path.isdir(bench):
        for e in sorted(os.listdir(bench)):
            p = os.path.join(bench, e)
            if os.path.isfile(p) and not e.endswith((".cpp", ".py", ".sh", ".md", ".json")):
                problem(p, 0, "bench/ holds benchmark sources (.cpp) and the scripts that run them (.py, .sh)")
    for path, backend in source_files(bench):
        stem = os.path.basename(path)[:-4]
        text = read(path)
        gb = "<benchmark/benchmark.h>" in text
        if stem.startswith("bench_") and NAME.fullmatch(stem[6:]):
            gbench[f"mls_lab{n}_bench_{stem[6:]}"] = path
            if not gb:
                problem(path, 0, "bench/bench_<name>.cpp is a Google Benchmark program (includes <benchmark/benchmark.h>); "
                                 "a driver with its own command line is bench/<name>_bench.cpp")
        elif stem.endswith("_bench") and NAME.fullmatch(stem[:-6]):
            program = "mls-" + stem[:-6].replace("_", "-") + "-bench"
            drivers[program] = path
            add_bin(program, path)
            if gb:
                problem(path, 0, "a Google Benchmark program is bench/bench_<name>.cpp; bench/<name>_bench.cpp is a driver")
        else:
            problem(path, 0, "a benchmark's file is bench/bench_<name>.cpp (Google Benchmark -> mls_labN_bench_<name>) "
                             "or bench/<name>_bench.cpp (a driver -> mls-<name>-bench), <name> lower_snake_case")
    return gbench, drivers


def check_lab_cmake(lab, n, word, cm, has_tools, has_benches, oracles):
    text = cmake_text(cm)
    if not re.search(rf"add_library\(mls_{word}\b", text):
        problem(cm, 0, f"the library of {lab} is the target mls_{word}")
    if not re.search(rf"add_library\(mls::{word} ALIAS mls_{word}\)", text):
        problem(cm, 0, f"the library of {lab} has the alias mls::{word}")
    for i, line in enumerate(text.splitlines(), 1):
        for lib in re.findall(r"add_library\(([\w:]+)", line):
            if lib.startswith("mls::"):
                if not re.fullmatch(rf"mls::{word}(_[a-z0-9]+)?", lib):
                    problem(cm, i, f"library alias {lib}: the libraries of {lab} are mls::{word} and mls::{word}_<part>")
            elif not re.fullmatch(rf"mls_{word}(_[a-z0-9]+)?", lib):
                problem(cm, i, f"library {lib}: the libraries of {lab} are mls_{word} and mls_{word}_<part> "
                               f"(a backend's: mls_{word}_<{'|'.join(BACKENDS)}>)")
        for exe in re.findall(r"add_executable\((\S+)", line):
            if not re.fullmatch(rf"mls_lab{n}_\w+", exe):
                problem(cm, i, f"add_executable({exe}): a lab's own programs are its test programs mls_lab{n}_*; tools and "
                               "benchmarks come from mls_add_lab_tools / mls_add_lab_benches")
        if re.search(r"\bmls_add_(tool|bench)\(", line):
            problem(cm, i, "tools and benchmarks are registered by mls_add_lab_tools / mls_add_lab_benches "
                           "(common/cmake/MlsLab.cmake), not by hand")
    if has_tools and not re.search(rf"mls_add_lab_tools\(lab{n}\b", text):
        problem(cm, 0, f"tools/ has programs: register them with mls_add_lab_tools(lab{n} LIBS ...)")
    if has_benches and not re.search(rf"mls_add_lab_benches\(lab{n}\b", text):
        problem(cm, 0, f"bench/ has programs: register them with mls_add_lab_benches(lab{n} LIBS ...)")
    for m in re.finditer(r"mls_add_oracle\(([^)]*)\)", text, re.S):
        args = m.group(1).split()
        tool = args[args.index("TOOL") + 1] if "TOOL" in args else None
        srcs = args[args.index("SOURCES") + 1] if "SOURCES" in args else None
        line = text[: m.start()].count("\n") + 1
        if tool not in oracles or srcs is None or os.path.join(os.path.dirname(cm), srcs) != oracles[tool]:
            problem(cm, line, f"mls_add_oracle TOOL {tool}: an oracle driver is tools/<name>_oracle.cpp -> mls-<name>-oracle")
    return text


def check_manifest(lab, n, base, gbench, drivers, cm_text):
    manifest = os.path.join(base, "lab.json")
    try:
        m = json.load(open(manifest, encoding="utf-8"))
    except (OSError, ValueError) as e:
        problem(manifest, 0, f"not valid JSON: {e}")
        return
    if not isinstance(m, dict):
        problem(manifest, 0, "the manifest is a JSON object")
        return
    check_keys(manifest, m, "top", "")
    if m.get("lab") != n:
        problem(manifest, 0, f"'lab' is {m.get('lab')!r}, expected {n} (the folder {lab})")
    if m.get("dir") != lab:
        problem(manifest, 0, f"'dir' is {m.get('dir')!r}, expected {lab!r}")
    if m.get("test_binary") != f"mls_lab{n}_tests":
        problem(manifest, 0, f"'test_binary' is {m.get('test_binary')!r}, expected 'mls_lab{n}_tests'")
    for i, g in enumerate(m.get("groups", []) or []):
        check_keys(manifest, g, "group", f"groups[{i}].")
        b = g.get("binary") if isinstance(g, dict) else None
        if b is not None and not re.fullmatch(rf"mls_lab{n}_(\w+_)?tests", b):
            problem(manifest, 0, f"groups[{i}].binary {b!r}: a group runs a test program of the lab, mls_lab{n}_[<backend>_]tests")
        elif b is not None and not re.search(rf"\b{re.escape(b)}\b", cm_text):
            problem(manifest, 0, f"groups[{i}].binary {b!r}: no such program in {lab}/CMakeLists.txt")
    for i, b in enumerate(m.get("benchmarks", []) or []):
        check_keys(manifest, b, "benchmark", f"benchmarks[{i}].")
        prog = b.get("binary") if isinstance(b, dict) else None
        if prog is not None and prog not in gbench and prog not in drivers:
            have = sorted(gbench) + sorted(drivers)
            problem(manifest, 0, f"benchmarks[{i}].binary {prog!r} is not a benchmark program of {lab} "
                                 f"(its bench/ builds: {', '.join(have) or 'none'})")
    if isinstance(m.get("build"), dict):
        check_keys(manifest, m["build"], "build", "build.")
    for r in m.get("student_files", []) or []:
        path = os.path.join(root, r)
        if not os.path.exists(path):
            problem(manifest, 0, f"student file {r} does not exist")
            continue
        first = open(path, encoding="utf-8").readline().rstrip("\n")
        if first != student_line(n):
            problem(path, 1, f"a student file opens with the line: {student_line(n)}")


# ---- the labs -----------------------------------------------------------------------------------
# data/ (optional): small files the examples and tests read (each with a README.md naming its source).
LAB_ENTRIES = {"CMakeLists.txt", "lab.json", "README.md", "include/", "src/", "tests/", "bench/", "tools/", "data/?"}
labs = sorted(d for d in os.listdir(root) if re.fullmatch(r"lab\d_\w+", d) and os.path.isdir(os.path.join(root, d)))
for lab in labs:
    n, word = int(lab[3]), lab[5:]
    base = os.path.join(root, lab)
    check_entries(base, LAB_ENTRIES, f"a lab folder ({lab}/)")
    data = os.path.join(base, "data")
    if os.path.isdir(data) and not os.path.isfile(os.path.join(data, "README.md")):
        problem(data, 0, "a lab's data/ has a README.md naming where its files come from and their licence")
    # headers: include/mls/<word>/ and nothing else
    inc = os.path.join(base, "include", "mls")
    if os.path.isdir(inc):
        for d in sorted(os.listdir(inc)):
            if d != word:
                problem(os.path.join(inc, d), 0, f"headers of {lab} belong in include/mls/{word}/, not include/mls/{d}")
        if not os.path.isdir(os.path.join(inc, word)):
            problem(base, 0, f"no include/mls/{word}/ folder")
    else:
        problem(base, 0, f"no include/mls/{word}/ folder")
    oracles = check_tools(lab, n, base, None)
    gbench, drivers = check_benches(lab, n, base)
    cm = os.path.join(base, "CMakeLists.txt")
    cm_text = ""
    if os.path.exists(cm):
        cm_text = check_lab_cmake(lab, n, word, cm, bool(source_files(os.path.join(base, "tools"))),
                                  bool(gbench or drivers), oracles)
    # namespaces of the library code (include/, src/, tools/, bench/): mls::<word>[::...]
    for sub in ("include", "src", "tools", "bench"):
        check_namespaces(os.path.join(base, sub), rf"mls::(inline )?{word}(::\w+)*", f"code of {lab} lives in mls::{word}")
    # tests: a named test namespace is <word>_test
    for dirpath, _, files in os.walk(os.path.join(base, "tests")):
        for f in files:
            if not f.endswith((".hpp", ".cpp")):
                continue
            path = os.path.join(dirpath, f)
            for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = re.match(r"^namespace\s+(\w+)_tests?\s*\{", line) or re.match(r"^namespace\s+(lab\d\w*)\s*\{", line)
                if m and line.split()[1] != f"{word}_test":
                    problem(path, i, f"test namespace {line.split()[1]}: the tests of {lab} use {word}_test")
    if os.path.exists(os.path.join(base, "lab.json")):
        check_manifest(lab, n, base, gbench, drivers, cm_text)
    handout = os.path.join(root, "handouts", f"lab{n}", "README.md")
    if not os.path.exists(handout):
        problem(handout, 0, "no handout")
    elif not re.search(r"^#+ Your tasks", read(handout), re.M):
        problem(handout, 0, 'the handout has no "Your tasks" table')

# ---- common/ -------------------------------------------------------------------------------------
def check_component(folder, word, extra):
    """common/ or grader/: its entries (README.md, the map, among them) and include/mls/<word>/ only."""
    check_entries(folder, {"CMakeLists.txt", "README.md", "include/", "src/", "tests/"} | extra, f"{word}/")
    if not os.path.isfile(os.path.join(folder, "README.md")):
        problem(folder, 0, f"{word}/ needs its README.md, the map of the folder (as every lab's)")
    inc = os.path.join(folder, "include", "mls")
    if os.path.isdir(inc):
        for d in sorted(os.listdir(inc)):
            if d != word:
                problem(os.path.join(inc, d), 0, f"headers of {word}/ belong in include/mls/{word}/, not include/mls/{d}")


common = os.path.join(root, "common")
if os.path.isdir(common):
    check_component(common, "common", {"cmake/", "fuzz/"})
    for f in sorted(os.listdir(os.path.join(common, "cmake"))) if os.path.isdir(os.path.join(common, "cmake")) else []:
        if not re.fullmatch(r"Mls[A-Z]\w*\.cmake", f):
            problem(os.path.join(common, "cmake", f), 0, "common/cmake/ holds the CMake helpers Mls<Name>.cmake")
    cm = os.path.join(common, "CMakeLists.txt")
    if os.path.exists(cm):
        text = cmake_text(cm)
        if not re.search(r"add_library\(mls::common ALIAS mls_common\)", text):
            problem(cm, 0, "the library of common/ is mls_common, alias mls::common")
    for sub in ("include", "src"):
        check_namespaces(os.path.join(common, sub), r"mls(::\w+)*", "common/'s code lives in mls[::...]")
else:
    problem(common, 0, "no common/ folder")

# ---- grader/ -------------------------------------------------------------------------------------
grader = os.path.join(root, "grader")
if os.path.isdir(grader):
    check_component(grader, "grader", {"tools/"})
    check_tools("grader", None, grader, None)
    cm = os.path.join(grader, "CMakeLists.txt")
    if os.path.exists(cm):
        text = cmake_text(cm)
        if not re.search(r"add_library\(mls_grader_lib\b", text):
            problem(cm, 0, "the library of grader/ is mls_grader_lib")
        for tool in re.findall(r"mls_add_tool\((\S+)\s+SOURCES\s+(\S+)", text):
            stem = os.path.basename(tool[1])[:-4]
            if not tool[1].startswith("tools/") or tool[0] != "mls-" + stem.replace("_", "-"):
                problem(cm, 0, f"mls_add_tool({tool[0]} SOURCES {tool[1]}): a grader tool is tools/<name>.cpp -> mls-<name>")
    for sub in ("include", "src", "tools"):
        check_namespaces(os.path.join(grader, sub), r"mls::grader(::\w+)*", "grader/'s code lives in mls::grader")
else:
    problem(grader, 0, "no grader/ folder")

# ---- test names: CTest's discovery splits a name at ';' (the grader says so for labs; here for all) ----
for top in [os.path.join(root, d) for d in sorted(os.listdir(root))]:
    tests = os.path.join(top, "tests")
    if not os.path.isdir(tests) or os.path.basename(top) == "build":
        continue
    for dirpath, _, files in os.walk(tests):
        for f in files:
            if not f.endswith(".cpp"):
                continue
            path = os.path.join(dirpath, f)
            for i, line in enumerate(read(path).splitlines(), 1):
                m = re.search(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"', line)
                if m and ";" in m.group(1):
                    problem(path, i, "a test case's name has a ';': CTest splits discovered names there and cannot run it (use ',')")

for note in notes:
    print("note:", note)
for p in problems:
    print(p)
print(f"check_conventions: {len(labs)} labs, common, grader; {len(bin_programs)} programs in bin/; {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
