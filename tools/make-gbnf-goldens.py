#!/usr/bin/env python3
"""Makes tests/fixtures/gbnf/llama-cpp.json: which texts llama.cpp's own GBNF engine takes whole,
for a set of grammars written to exercise the syntax (literals, classes, `.`, repetitions,
groups, recursion, escapes, Unicode, comments, line ends) and the places where a lexer would
decide differently from a character-level grammar. tools/src/gbnf-accepts.cpp is built against
llama.cpp b11434 (../shared/tools/build-llama-cpp.sh) and asked, per grammar, whether it parses
and which texts it takes. The test suite (tests/tests/golden/gbnf.rs) runs the same grammars
and texts through the engine's grammar compiler and compares.

    tools/make-gbnf-goldens.py
"""

import json
import os
import subprocess
import sys
import tempfile

from llama_helpers import build_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gbnf", "llama-cpp.json")

CASES = [
    (
        "json",
        r'''# a JSON value, spaces after the structural characters
root    ::= value
value   ::= obj | arr | str | num | ("true" | "false" | "null") sp
obj     ::= "{" sp ( member ( "," sp member )* )? "}" sp
member  ::= str ":" sp value
arr     ::= "[" sp ( value ( "," sp value )* )? "]" sp
str     ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( [\\"/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" sp
num     ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? sp
sp      ::= [ \t\n]*
''',
        ['{}', '{"a": 1}', '{"a":[1, 2.5e-3, true, null, {"b": "x\\"y"}]}', '[ ]', '"\\u00e9"', '-0.5',
         '{"a": 1,}', '[01]', '{"a" 1}', '"\\x"', '{"a": "line\nbreak"}', '1.', 'tru', '{} ', '[1, 2] \n'],
    ),
    (
        "arithmetic",
        r'''root  ::= ( line "\n" )+
line  ::= name "=" sp expr
expr  ::= term ( [-+*/] sp term )*
term  ::= name | number | "(" sp expr ")" sp
name  ::= [a-z] [a-z0-9_]* sp
number ::= [0-9]+ sp
sp    ::= [ \t]*
''',
        ['x=1\n', 'x = 1 + 2\n', 'a=(b*2)-c\nd=4\n', 'x=1', 'x=\n', '=1\n', 'x=(1\n', 'x = y \n\n', 'x=1 \n'],
    ),
    (
        "trailing-space-before-newline",
        r'''root ::= ( word "\n" )+
word ::= [a-z]+ ws
ws   ::= [ \n]*
''',
        ['a\n', 'a \n', 'a\n\n', 'ab cd\n', 'a', 'a b\n', 'a\nb\n', '\n'],
    ),
    (
        "prefix-literals",
        r'''root ::= "a" x | "ab" y
x    ::= "b" x | "c"
y    ::= "d" y | "e"
''',
        ['ac', 'abc', 'abbc', 'abe', 'abdde', 'a', 'ab', 'abd', 'abce', 'ae'],
    ),
    (
        "greedy-class",
        r'''root ::= [a-z]* tail
tail ::= "a" tail | "b"
''',
        ['b', 'ab', 'zzab', 'aab', 'zzz', 'a', 'ba', 'bb'],
    ),
    (
        "repetitions",
        r'''root ::= "x"{3} "-" [0-9]{2,4} "-" ( "ab" ){1,} "-" "q"{0,2} "-" ( "y" | "z" )? "-" "w"* "." +
''',
        ['xxx-12-ab---.', 'xxx-1234-abab-qq-y-www...', 'xx-12-ab---.', 'xxx-1-ab---.', 'xxx-12345-ab---.',
         'xxx-12--qq--.', 'xxx-12-ab-qqq--.', 'xxx-12-ab--yz-.', 'xxx-12-ab---', 'xxx-12-ab---..'],
    ),
    (
        "nested-groups",
        r'''root ::= ( "(" ( [a-c] | "-" [0-9] )+ ")" )* ( "!" | "?" ( "?" )? )
''',
        ['!', '(a)!', '(ab-1c)(c)??', '(a-)!', '()!', '(a)', '(d)!', '??', '???'],
    ),
    (
        "any-character",
        r'''root ::= "<" . . ">" .*
''',
        ['<ab>', '<\n\t>rest', '<éü>', '<日本>語', '<a>', '<abc>', '<ab', 'x<ab>'],
    ),
    (
        "unicode",
        r'''root ::= greek+ " " "日本" [\u3040-\u309F]* emoji?
greek ::= [α-ω] | [\u0391-\u03A9]
emoji ::= [\U0001F600-\U0001F64F]
''',
        ['αβ 日本', 'Ωω 日本ひらがな', 'α 日本😀', 'α 日本あ🙏', 'a 日本', 'α 日本カ', 'α 日本😀😀', 'α日本'],
    ),
    (
        "escapes",
        r'''root ::= "\x41\t\"\\" [\[\]\-] [\x30-\x39\-] "\u00e9" [^\n\r]
''',
        ['A\t"\\[0é.', 'A\t"\\]-éx', 'A\t"\\-9é ', 'A\t"\\a0é.', 'A\t"\\[0é\n', 'A "\\[0é.', 'A\t"\\[0e.'],
    ),
    (
        "class-edges",
        r'''root ::= [a-] [-z] [^-a-c] [^^]
''',
        ['a-d!', '--z^a', 'azz^', 'b-d!', 'a-a!', 'a-d^', 'a-^!'],
    ),
    (
        "layout",
        "# comments, CRLF line ends, names with digits and dashes, a rule used before it is\r\n"
        "# defined, alternatives continued after `|`, and a redefinition (the last one counts)\r\n"
        "root ::= part-1 part-2   # trailing comment\r\n"
        "part-1 ::= \"a\" |\r\n"
        "   \"b\" |   # after the bar\r\n"
        "   \"c\"\r\n"
        "part-2 ::= \"x\"\r\n"
        "part-2 ::= ( \"y\"\r\n"
        "  | \"z\" )\r\n",
        ['ay', 'bz', 'cy', 'ax', 'dy', 'a', 'aby'],
    ),
    (
        "empty-alternatives",
        r'''root ::= "[" opt "]" ( | "!" )
opt  ::= | "a" opt | ""
''',
        ['[]', '[a]!', '[aaa]', '[b]', '[]!!', '['],
    ),
    (
        "lines",
        r'''root ::= ( "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n" ){1,3}
''',
        ['- one\n', '- one\n- two two\n- 3\n', '- one\n- two\n- 3\n- 4\n', '- \n', '- one', '-one\n', '- a\u2028b\n'],
    ),
    ("invalid-missing-definition-sign", 'root "a"\n', []),
    ("invalid-unclosed-string", 'root ::= "abc\n', []),
    ("invalid-unclosed-group", 'root ::= ( "a" | "b"\n', []),
    ("invalid-undefined-rule", 'root ::= item\n', []),
    ("invalid-no-root", 'item ::= "a"\n', []),
    ("invalid-unknown-escape", 'root ::= "\\q"\n', []),
    ("invalid-nothing-to-repeat", 'root ::= * "a"\n', []),
    ("invalid-unclosed-class", 'root ::= [a-z\n', []),
    ("invalid-short-hex", 'root ::= "\\x4"\n', []),
    ("invalid-second-line", 'root ::= "a" b\nb ::= "b" )\n', []),
]


def main() -> None:
    exe = build_helper("gbnf-accepts")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, grammar, texts in CASES:
            gpath, tpath = os.path.join(tmp, "g.gbnf"), os.path.join(tmp, "t")
            with open(gpath, "w", encoding="utf-8", newline="") as f:
                f.write(grammar)
            with open(tpath, "wb") as f:
                f.write(b"\0".join(t.encode("utf-8") for t in texts))
            lines = subprocess.run([exe, gpath, tpath], check=True, capture_output=True, text=True).stdout.split()
            if lines == ["invalid"]:
                out.append({"name": name, "grammar": grammar, "valid": False, "texts": []})
                continue
            if len(lines) != max(len(texts), 1):
                sys.exit(f"{name}: {len(texts)} texts, {len(lines)} answers")
            verdicts = [{"text": t, "takes": v == "1"} for t, v in zip(texts, lines)]
            out.append({"name": name, "grammar": grammar, "valid": True, "texts": verdicts})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"llama_cpp": "b11434", "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    taken = sum(t["takes"] for c in out for t in c["texts"])
    total = sum(len(c["texts"]) for c in out)
    print(f"{OUT}: {len(out)} grammars, {total} texts ({taken} taken)")


if __name__ == "__main__":
    main()
