#!/usr/bin/env python3
"""Writes the tokenizer test corpus (tests/tokenizer/data/corpus.jsonl): >= 1 MB of varied text made from a
fixed seed, nothing downloaded. One JSON object per line: {"kind": ..., "text": ...}. Kinds: English prose,
source code, CJK, Arabic/Hebrew/Indic/Thai, emoji and ZWJ sequences, numbers, whitespace runs, every added
token of tokenizer.json in context, random code points, random bytes made valid (U+FFFD), and mixtures.
Usage: python3 tools/tokenizer/make_corpus.py [--tokenizer .embedded/tokenizer.json] [--out FILE]
"""
import argparse
import json
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDS = ("the of and to in is was that for on are with as at be this have from or by one had not but what all "
         "were when we there can an your which their said if do will each about how up out them then she many "
         "some so these would other into has more her two like him see time could no make than first been its "
         "who now people my made over did down only way find use may water long little very after words called "
         "just where most know get through back much before go good new write our used me man too any day same "
         "right look think also around another came come work three word must because does part even place well "
         "such here take why things help put years different away again off went old number great tell men say "
         "small every found still between name should home big give air line set own under read last never us "
         "left end along while might next sound below saw something thought both few those always looked show "
         "large often together asked house don't world going want school important until form food keep children "
         "feet land side without boy once animals life enough took sometimes four head above kind began almost "
         "live page got earth need far hand high year mother light parts country father let night following "
         "picture being study second eyes soon times story boys since white days ever paper hard near sentence "
         "better best across during today others however sure means knew it's try told young miles sun ways thing "
         "whole hear example heard several change answer room sea against top turned learn point city play toward "
         "five using himself usually I'm we're they'll she'd couldn't naïve café résumé coöperate façade").split()
IDENTS = ("x y i j k n count value result buffer data items index offset size length node tree config "
          "request response handler parse_token encodeMessages max_len tmp_ptr kBlockSize HTTPServer "
          "user_id getValue setValue __init__ self cls args kwargs").split()
KEYWORDS_PY = ["def", "return", "if", "elif", "else", "for", "while", "in", "import", "from", "class", "with",
               "as", "try", "except", "raise", "lambda", "yield", "not", "and", "or", "None", "True", "False"]
OPS = ["=", "==", "!=", "+=", "-", "*", "/", "//", "%", "**", "<", ">=", "<<", ">>", "&&", "||", "->", "::", "=>",
       "...", "!", "~", "^", "|", "&", "?:"]
CJK_PUNCT = "，。！？、；：「」『』（）《》【】…—～・"
ARABIC_WORDS = ["السلام", "عليكم", "مرحبا", "كتاب", "مدرسة", "الحمد", "لله", "شكرا", "جميل", "العربية", "محمد",
                "بِسْمِ", "اللَّهِ", "الرَّحْمَٰنِ", "الرَّحِيمِ", "فارسی", "زبان", "خیلی", "ممنون"]
HEBREW_WORDS = ["שלום", "עולם", "תודה", "בְּרֵאשִׁית", "בָּרָא", "אֱלֹהִים"]
INDIC_WORDS = ["नमस्ते", "भारत", "हिन्दी", "क्षत्रिय", "স্বাগতম", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ภาษาไทย",
               "สวัสดีครับ", "ខ្មែរ", "မြန်မာ"]
EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "🎉", "❤️", "👍", "👍🏽", "👋🏿", "🙏", "🗼", "🇯🇵", "🇩🇪", "🇺🇸",
         "🏳️‍🌈", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🧑‍🤝‍🧑", "❤️‍🔥", "#️⃣", "1️⃣", "©️", "™", "🫠", "🪿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
         "✌️", "☕", "⚡", "🐈‍⬛", "👁️‍🗨️"]


def prose(r):
    out = []
    for _ in range(r.randint(2, 6)):
        sent = []
        for _ in range(r.randint(3, 9)):
            words = [r.choice(WORDS) for _ in range(r.randint(3, 14))]
            words[0] = words[0].capitalize()
            if r.random() < 0.2:
                k = r.randrange(len(words))
                words[k] = r.choice(['"', "'", "(", "[", "--"]) + words[k] + r.choice(['"', "'", ")", "]", ","])
            if r.random() < 0.15:
                words.insert(r.randrange(len(words)), str(r.randint(0, 100000)))
            sent.append(" ".join(words) + r.choice([".", ".", ".", "?", "!", "...", ";", ":"]))
        out.append(" ".join(sent))
    return r.choice(["\n\n", "\n", "\r\n\r\n"]).join(out)


def code(r):
    lines, indent = [], 0
    style = r.choice(["py", "c", "js"])
    for _ in range(r.randint(10, 40)):
        ind = ("    " if style != "c" or r.random() < 0.7 else "\t") * indent
        kind = r.random()
        a, b = r.choice(IDENTS), r.choice(IDENTS)
        if kind < 0.15:
            head = {"py": f"def {a}({b}, *args, **kwargs):", "c": f"static int {a}(const char* {b}, size_t n) {{",
                    "js": f"function {a}({b}) {{"}[style]
            lines.append(ind + head)
            indent = min(indent + 1, 6)
        elif kind < 0.25 and indent:
            indent -= 1
            lines.append(("    " * indent) + ("" if style == "py" else "}"))
        elif kind < 0.35:
            lines.append(ind + {"py": "# ", "c": "// ", "js": "/* "}[style] + prose(r)[:r.randint(10, 90)].replace("\n", " "))
        elif kind < 0.45:
            lines.append(ind + f'{a} = "{r.choice(WORDS)}\\n{r.choice(IDENTS)}\\t%d" % {r.randint(0, 999)}')
        else:
            expr = f"{a} {r.choice(OPS)} {b}{r.choice(['[i]', '(0x' + format(r.getrandbits(24), 'X') + ')', '.size()', '', '->next'])}"
            lines.append(ind + expr + ("" if style == "py" else ";") + (" " * r.randint(0, 3)))
        if r.random() < 0.1:
            lines.append("")
    return "\n".join(lines) + "\n"


def cjk(r):
    parts = []
    for _ in range(r.randint(20, 80)):
        k = r.random()
        if k < 0.45:
            parts.append("".join(chr(r.randint(0x4E00, 0x9FA5)) for _ in range(r.randint(1, 12))))
        elif k < 0.6:
            parts.append("".join(chr(r.randint(0x3041, 0x30FF)) for _ in range(r.randint(1, 8))))
        elif k < 0.72:
            parts.append("".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(r.randint(1, 5))) + " ")
        elif k < 0.85:
            parts.append(r.choice(CJK_PUNCT))
        elif k < 0.92:
            parts.append(r.choice([" ", "", str(r.randint(0, 9999)), "ＡＢＣ１２３", "\u3000", "\n"]))
        else:
            parts.append(chr(r.randint(0x20000, 0x2A6DF)) + r.choice(WORDS))
    return "".join(parts)


def rtl_indic(r):
    parts = []
    for _ in range(r.randint(20, 60)):
        k = r.random()
        if k < 0.35:
            parts.append(r.choice(ARABIC_WORDS))
        elif k < 0.5:
            parts.append(r.choice(HEBREW_WORDS))
        elif k < 0.75:
            parts.append(r.choice(INDIC_WORDS))
        elif k < 0.85:
            parts.append("".join(chr(r.randint(0x0660, 0x0669)) for _ in range(r.randint(1, 6))))
        else:
            parts.append(r.choice(["\u200f", "\u200e", "،", "؟", "।", "\u064b", "\u0651", r.choice(WORDS), "123"]))
        parts.append(r.choice([" ", " ", " ", "", "\n", "، "]))
    return "".join(parts)


def emoji(r):
    parts = []
    for _ in range(r.randint(20, 80)):
        e = r.choice(EMOJI)
        if r.random() < 0.2:
            e = "\u200d".join(r.choice(EMOJI) for _ in range(r.randint(2, 4)))
        parts.append(e)
        parts.append(r.choice(["", " ", "  ", r.choice(WORDS), "!", "\n", "\ufe0f", "\u200d"]))
    return "".join(parts)


def numbers(r):
    parts = []
    for _ in range(r.randint(30, 120)):
        k = r.random()
        if k < 0.3:
            parts.append(str(r.randint(0, 10 ** r.randint(1, 30))))
        elif k < 0.45:
            parts.append(f"{r.uniform(-1e6, 1e6):.{r.randint(0, 9)}f}")
        elif k < 0.55:
            parts.append(f"{r.random():.3e}")
        elif k < 0.65:
            parts.append(f"{r.randint(1900, 2099)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}")
        elif k < 0.72:
            parts.append(f"+1 ({r.randint(200, 999)}) {r.randint(100, 999)}-{r.randint(1000, 9999)}")
        elif k < 0.8:
            parts.append(f"{r.randint(1, 999):,}{r.randint(0, 999):03d}")
        else:
            digits = r.choice(["０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "²³¹¼½¾", "ⅠⅡⅢⅣⅫ", "①②③", "𝟘𝟙𝟚"])
            parts.append("".join(r.choice(digits) for _ in range(r.randint(1, 7))))
        parts.append(r.choice([" ", ", ", "\n", "x", "%", " $", "€", "", "\t"]))
    return "".join(parts)


def whitespace(r):
    parts = []
    for _ in range(r.randint(20, 60)):
        k = r.random()
        if k < 0.4:
            parts.append(" " * r.choice([1, 2, 3, 4, 7, 8, 15, 16, 31, 64, 100, 257, 1000]))
        elif k < 0.55:
            parts.append("\t" * r.randint(1, 20))
        elif k < 0.7:
            parts.append("".join(r.choice(["\n", "\r\n", "\r", " ", "\t", "\u00a0", "\u3000", "\u2028", "\x0b",
                                            "\x0c", "\u2003", "\u0085"]) for _ in range(r.randint(1, 30))))
        else:
            parts.append(r.choice([r.choice(WORDS), str(r.randint(0, 99999)), "!?", "é", "中文", "😀", "...", "a b"]))
    return "".join(parts)


def specials(r, added):
    parts = []
    for _ in range(r.randint(20, 50)):
        t = r.choice(added)
        k = r.random()
        if k < 0.1:
            t = t[: r.randint(1, max(1, len(t) - 1))]  # a truncated token: plain text
        elif k < 0.2:
            t = t + r.choice(added)
        parts.append(t)
        parts.append(r.choice(["", " ", "\n", r.choice(WORDS), " " + r.choice(WORDS) + " ", "中文", "😀", "123", "<", "｜"]))
    return "".join(parts)


def random_code_points(r):
    out = []
    for _ in range(r.randint(100, 400)):
        plane = r.random()
        if plane < 0.5:
            cp = r.randint(0x20, 0xFFFF)
        elif plane < 0.8:
            cp = r.randint(0x10000, 0x3FFFF)
        elif plane < 0.9:
            cp = r.randint(0xE0000, 0x10FFFF)
        else:
            cp = r.randint(0, 0x7F)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def random_bytes(r):
    return bytes(r.getrandbits(8) for _ in range(r.randint(100, 800))).decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(ROOT / ".embedded/tokenizer.json"))
    ap.add_argument("--out", default=str(ROOT / "tests/tokenizer/data/corpus.jsonl"))
    ap.add_argument("--seed", type=int, default=20260731)
    args = ap.parse_args()
    added = [a["content"] for a in json.loads(pathlib.Path(args.tokenizer).read_text(encoding="utf-8"))["added_tokens"]]
    r = random.Random(args.seed)
    makers = {"prose": prose, "code": code, "cjk": cjk, "rtl_indic": rtl_indic, "emoji": emoji, "numbers": numbers,
              "whitespace": whitespace, "specials": lambda r: specials(r, added), "code_points": random_code_points,
              "random_bytes": random_bytes}
    docs = []
    # Every added token at least once, in context.
    for i in range(0, len(added), 40):
        docs.append({"kind": "specials_all", "text": " x".join(added[i:i + 40]) + "\n" + "".join(added[i:i + 40])})
    size = sum(len(d["text"].encode()) for d in docs)
    n = 0
    while size < 1_150_000:
        kind = list(makers)[n % len(makers)]
        if n % 7 == 6:
            text = "".join(makers[r.choice(list(makers))](r) for _ in range(3))
            kind = "mixed"
        else:
            text = makers[kind](r)
        docs.append({"kind": kind, "text": text})
        size += len(text.encode())
        n += 1
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    print(f"make_corpus: {len(docs)} documents, {size} bytes of text -> {args.out}")


if __name__ == "__main__":
    main()
