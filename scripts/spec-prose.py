#!/usr/bin/env python3
"""The prose prompts of `lowrank bench --spec` (docs/results/speculative.md):
20 of wiki.eval.raw's 46 articles, evenly spaced, each asked to be continued
from its title and opening (about 700 characters, cut at a sentence's end;
WikiText's token spacing undone: "1 @,@ 000" -> "1,000", "( born" -> "(born").
Writes the prompt-set format of bench/prompts/spec-code.txt to stdout.

  scripts/spec-prose.py ../shared/data/wiki.eval.raw > /tmp/spec-prose.txt
"""
import re
import sys

N, CHARS = 20, 700


def clean(s):
    s = re.sub(r" @(.)@ ", r"\1", s)
    s = re.sub(r" ([,.;:!?)\]'])", r"\1", s)
    s = re.sub(r"([(\[]) ", r"\1", s)
    return s.replace(" 's", "'s").replace(" n't", "n't").strip()


def main():
    text = open(sys.argv[1], encoding="utf-8").read().replace("\r\n", "\n")
    title = re.compile(r"^ = ([^=].*) = $")
    articles = []  # (title, [paragraphs])
    for line in text.split("\n"):
        m = title.match(line)
        if m:
            articles.append((m.group(1).strip(), []))
        elif articles and line.strip() and not line.startswith(" = "):
            articles[-1][1].append(clean(line))
    if len(articles) < N:
        sys.exit(f"{sys.argv[1]}: {len(articles)} articles, {N} needed")
    print("# Prose prompts for lowrank bench --spec, written by scripts/spec-prose.py")
    for i in range(N):
        name, paras = articles[i * len(articles) // N]
        opening = " ".join(paras)
        cut = opening.rfind(". ", 0, CHARS)
        opening = opening[: cut + 1] if cut > 0 else opening[:CHARS]
        print(f"@@@ prose-{i + 1:02d}")
        print("Continue this encyclopedia article from where it stops, in the same style, "
              "for a few paragraphs.\n")
        print(f"{name}\n\n{opening}")


if __name__ == "__main__":
    main()
