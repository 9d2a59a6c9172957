#!/usr/bin/env python3
"""Check relative markdown links (files and #anchors, GitHub-style) in the given .md files.

    python3 docs/check_links.py README.md docs/*.md
"""
import os, re, sys

def slug(h):
    s = h.strip().lower()
    s = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', s)  # links in headings
    s = re.sub(r'[^\w\- ]', '', s)  # GitHub keeps letters, digits, _, -, space
    return s.replace(' ', '-')

def anchors(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
            continue
        if fence:
            continue
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f'{base}-{n}')
    return out

bad = 0
link_re = re.compile(r'(?<!!)\[[^\]]*\]\(([^)\s]+)\)')
for md in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(md, encoding='utf-8'), 1):
        if line.startswith('```'):
            fence = not fence
            continue
        if fence:
            continue
        for target in link_re.findall(re.sub(r'`[^`]*`', '', line)):
            if re.match(r'^[a-z]+:', target):
                continue
            path, _, frag = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                print(f'{md}:{no}: missing file {target}'); bad += 1; continue
            if frag:
                if not dest.endswith('.md') or frag not in anchors(dest):
                    print(f'{md}:{no}: missing anchor {target}'); bad += 1
print(f'{bad} broken link(s)')
sys.exit(1 if bad else 0)
