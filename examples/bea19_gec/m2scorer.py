#!/usr/bin/env python3
"""The MaxMatch (M2) scorer of grammatical error correction (Dahlmeier & Ng 2012), computed as the
official NUS M2 scorer 3.2 (m2scorer, used for CoNLL-2014) computes it, in Python 3, without its code:

1. The system's edits are read off the token-level Levenshtein alignment of source and output: the
   lattice of every alignment of least cost, with substitutions costing 1 and with them costing 2,
   merged; edges joined into longer edits when at most MAX_UNCHANGED_WORDS unchanged tokens lie
   inside (default 2).
2. For each annotator of a sentence, the path through that lattice that matches the most of the
   annotator's gold edits (matching edges weigh -|E|, other edits 1 + 0.001 each, so that among
   equally matching paths the one with the fewest edits wins) gives the system's edits, and an edit
   is correct when offsets, original text and one of the gold corrections agree.
3. Per sentence, the annotator that gives the best F-beta of the counts so far (with this sentence)
   is chosen, ties going to more correct edits, then to fewer proposed + beta^2 gold ones, then to
   the lower annotator id; P = correct / proposed, R = correct / gold, F-beta over the whole corpus.

The official scorer's quirks are kept so that scores agree: the weights of edges found in both
lattices counted twice, its way of removing joined edits of unchanged tokens only, gold edits matched
in order. Insertions before the first source token are at offset 0, as in the scorer's repository
since 2016 (github.com/nusnlp/m2scorer, which Ge et al. 2022 used; release 3.2 put them at 0, 1, 2,
...). A 'noop' gold edit (or '-1 -1' offsets) marks an annotator who changed nothing.

    python examples/bea19_gec/m2scorer.py SYSTEM GOLD.m2 [--beta 0.5] [--max-unchanged-words 2]
        [--ignore-whitespace-casing] [--fairseq-generate] [-v]

SYSTEM: one tokenized output per line, or with --fairseq-generate the log of fairseq-generate
(its H-<id> lines, BPE removed with --remove-bpe, in id order). Prints Precision, Recall and F_beta
as the official scorer does.
"""
import argparse
import re
import sys

EPSILON = 0.001
INF = float("inf")


# ---------------------------------------------------------------------------------------------
# gold edits

def load_annotation(path):
    """(source sentences, gold edits) of an M2 file; a sentence's gold edits are {annotator: [(start,
    end, original text, [corrections])]} in file order, noop edits dropped (their annotator stays,
    with no edits); a sentence without any 'A' line has annotator 0 with no edits."""
    sources, golds = [], []
    with open(path, encoding="utf-8") as f:
        blocks = re.split(r"\n[ \t\r]*\n", f.read())
    for block in blocks:
        lines = [line.rstrip("\r") for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        sentences = [line[2:].strip() for line in lines if line.startswith("S ")]
        if not sentences:
            raise ValueError(f"{path}: a block without an 'S' line: {lines[0][:80]!r}")
        words = " ".join(sentences).split()
        by_annotator = {}
        for line in lines[1:]:
            if line.startswith(("S ", "I ")):
                continue
            if not line.startswith("A "):
                raise ValueError(f"{path}: not an 'A' line: {line[:80]!r}")
            fields = line[2:].split("|||")
            start, end = (int(x) for x in fields[0].split()[:2])
            if fields[1] == "noop":
                start = end = -1
            corrections = [c.strip() if c != "-NONE-" else "" for c in fields[2].split("||")]
            by_annotator.setdefault(int(fields[5]), []).append(
                (start, end, " ".join(words[start:end]), corrections))
        length = 0
        for sentence in sentences:  # several 'S' lines in a block: edits up to each one's end
            length += len(sentence.split())
            sources.append(sentence)
            gold = {who: [e for e in edits if 0 <= e[0] <= length and 0 <= e[1] <= length]
                    for who, edits in sorted(by_annotator.items())}
            golds.append(gold or {0: []})
    return sources, golds


# ---------------------------------------------------------------------------------------------
# the system's edit lattice; an edit is (kind, start, end, original, correction, unchanged words)

def alignment_lattice(source, output, substitution_cost):
    """{(i, j): [(previous vertex, edit)]}: the last steps of the least-cost alignments of
    source[:i] with output[:j], in the order substitution or match, deletion, insertion."""
    n, m = len(source), len(output)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    back = {}
    for i in range(1, n + 1):
        cost[i][0] = i
        back[(i, 0)] = [((i - 1, 0), ("del", i - 1, i, source[i - 1], "", 0))]
    for j in range(1, m + 1):
        cost[0][j] = j
        back[(0, j)] = [((0, j - 1), ("ins", 0, 0, "", output[j - 1], 0))]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            same = source[i - 1] == output[j - 1]
            substitution = cost[i - 1][j - 1] + (0 if same else substitution_cost)
            deletion = cost[i - 1][j] + 1
            insertion = cost[i][j - 1] + 1
            best = min(substitution, deletion, insertion)
            cost[i][j] = best
            steps = back[(i, j)] = []
            if substitution == best:
                steps.append(((i - 1, j - 1), ("noop", i - 1, i, source[i - 1], output[j - 1], 1) if same
                               else ("sub", i - 1, i, source[i - 1], output[j - 1], 0)))
            if deletion == best:
                steps.append(((i - 1, j), ("del", i - 1, i, source[i - 1], "", 0)))
            if insertion == best:
                steps.append(((i, j - 1), ("ins", i, i, "", output[j - 1], 0)))
    return back


def lattice_edges(back, end):
    """The vertices reachable backwards from END and the edges (u, v) into them, with their edits."""
    vertices, edges, edits, todo = {end}, [], {}, [end]
    while todo:
        v = todo.pop()
        for u, edit in back.get(v, ()):
            edges.append((u, v))
            edits[(u, v)] = edit
            if u not in vertices:
                vertices.add(u)
                todo.append(u)
    return vertices, edges, edits


def join_edits(first, second):
    """The edit made of two consecutive ones: an insertion's empty original and a deletion's empty
    correction are left out of the joined texts."""
    kinds = {first[0], second[0]}
    kind = first[0] if len(kinds) == 1 and first[0] in ("ins", "del", "noop") else "sub"
    original = " ".join(e[3] for e in (first, second) if e[0] != "ins")
    correction = " ".join(e[4] for e in (first, second) if e[0] != "del")
    return kind, first[1], second[2], original, correction, first[5] + second[5]


def edit_graph(source, output, max_unchanged_words):
    """(sorted vertices, edge list, {edge: length in base edges}, {edge: edit}) of the lattice
    with the joined edits."""
    end = (len(source), len(output))
    v1, e1, edits = lattice_edges(alignment_lattice(source, output, 1), end)
    v2, e2, edits2 = lattice_edges(alignment_lattice(source, output, 2), end)
    for edge, edit in edits2.items():
        edits.setdefault(edge, edit)
    vertices = sorted(v1 | v2)
    edges = sorted(e1 + e2)  # an edge of both lattices is listed twice (as the official scorer does)
    length = {edge: 1 for edge in edges}
    successors, predecessors = {}, {}
    for u, v in edits:
        successors.setdefault(u, set()).add(v)
        predecessors.setdefault(v, set()).add(u)
    # joined edits, Floyd-Warshall order (the official scorer's loops over the sorted vertices)
    for k in vertices:
        for i in sorted(predecessors.get(k, ())):
            for j in sorted(successors.get(k, ())):
                through = length[(i, k)] + length[(k, j)]
                if through < length.get((i, j), INF):
                    joined = join_edits(edits[(i, k)], edits[(k, j)])
                    if joined[5] <= max_unchanged_words:
                        edges.append((i, j))
                        length[(i, j)] = through
                        edits[(i, j)] = joined
                        successors.setdefault(i, set()).add(j)
                        predecessors.setdefault(j, set()).add(i)
    # joined runs of unchanged tokens go; like the official scorer, which removes them from the list it
    # is iterating over, the edge after each removed one is not looked at
    index = 0
    while index < len(edges):
        edge = edges[index]
        edit = edits.get(edge)
        if edit is not None and edit[0] == "noop" and length[edge] > 1:
            edges.remove(edge)
            length[edge] = INF
            del edits[edge]
        index += 1
    return vertices, edges, length, edits


def gold_weights(edges, length, edits, gold):
    """Edge weights for one annotator: edges matching a gold edit weigh -|E|, other edits get
    EPSILON more than their length (unchanged tokens do not)."""
    weight = dict(length)

    def matches(edit, g):
        return edit[1] == g[0] and edit[2] == g[1] and edit[3] == g[2] and edit[4] in g[3]

    by_span, gold_by_span = {}, {}
    for edge in edges:
        if edge in edits:
            by_span.setdefault(edits[edge][1:3], []).append(edge)
    for g in gold:
        gold_by_span.setdefault((g[0], g[1]), []).append(g)
    for span in sorted(by_span):
        candidates = sorted(by_span[span])
        golds = gold_by_span.get(span, [])
        if span[0] != span[1]:  # deletions and substitutions
            for edge in candidates:
                edit = edits[edge]
                if any(matches(edit, g) for g in golds):
                    weight[edge] = -len(edges)
                elif edit[0] != "noop":
                    weight[edge] += EPSILON
            continue
        # insertions at one position: the official scorer walks the edges from both ends, matching
        # gold insertions in order from the left and from the right
        left, right, current = 0, len(candidates) - 1, 0
        gold_left, gold_right = 0, len(golds) - 1
        while left <= right:
            edge = candidates[current]
            edit = edits[edge]
            from_left = current == left
            order = range(gold_left, gold_right + 1)
            matched = False
            for g in (order if from_left else reversed(order)):
                if matches(edit, golds[g]):
                    matched = True
                    weight[edge] = -len(edges)
                    if from_left:
                        gold_left = g + 1
                    else:
                        gold_right = g - 1
                    break
            if not matched and edit[0] != "noop":
                weight[edge] += EPSILON
            if matched and from_left:
                left += 1
                while left < len(candidates) and candidates[left][0] != candidates[current][1]:
                    weight[candidates[left]] += EPSILON
                    left += 1
                current = left
            elif matched:
                right -= 1
                while right >= 0 and candidates[right][1] != candidates[current][0]:
                    weight[candidates[right]] += EPSILON
                    right -= 1
                current = right
            elif from_left:
                left += 1
                current = right
            else:
                right -= 1
                current = left
    return weight


def best_edits(vertices, edges, weight, edits):
    """The system's edits (start, end, original, correction) on the lightest path from (0, 0) to the
    last vertex (Bellman-Ford over the edges in order, as the official scorer), last edit first."""
    distance = dict.fromkeys(vertices, INF)
    distance[(0, 0)] = 0
    previous = {}
    for _ in range(len(vertices) - 1):
        changed = False
        for edge in edges:
            u, v = edge
            if distance[u] + weight[edge] < distance[v]:
                distance[v] = distance[u] + weight[edge]
                previous[v] = u
                changed = True
        if not changed:
            break
    sequence, v = [], vertices[-1]
    while v in previous:
        u = previous[v]
        kind, start, end, original, correction, _ = edits[(u, v)]
        if kind != "noop":
            sequence.append((start, end, original, correction))
        v = u
    return sequence


def correct_edits(sequence, gold):
    """The system edits that match a gold edit, gold edits taken in order (as the official scorer)."""
    found, first = [], 0
    for edit in reversed(sequence):
        for g in range(first, len(gold)):
            start, end, original, corrections = gold[g]
            if edit[0] == start and edit[1] == end and edit[2] == original and edit[3] in corrections:
                found.append(edit)
                first = g + 1
    return found


def f_beta(correct, proposed, gold, beta):
    try:
        return (1 + beta * beta) * correct / (beta * beta * gold + proposed)
    except ZeroDivisionError:
        return 1.0 if correct == 0 else 0.0


def score(system, sources, golds, beta=0.5, max_unchanged_words=2, ignore_whitespace_casing=False,
          verbose=False):
    """(precision, recall, F-beta, correct, proposed, gold) of SYSTEM's sentences."""
    if len(system) != len(sources):
        raise ValueError(f"{len(system)} system sentences for {len(sources)} source sentences")
    total_correct = total_proposed = total_gold = 0
    for number, (output, source, gold_set) in enumerate(zip(system, sources, golds), 1):
        vertices, edges, length, edits = edit_graph(source.split(), output.split(), max_unchanged_words)
        chosen = None
        for annotator, gold in gold_set.items():
            sequence = best_edits(vertices, edges, gold_weights(edges, length, edits, gold), edits)
            if ignore_whitespace_casing:
                sequence = [e for e in sequence if e[2].replace(" ", "").lower() != e[3].replace(" ", "").lower()]
            correct = correct_edits(sequence, gold)
            c, p, g = total_correct + len(correct), total_proposed + len(sequence), total_gold + len(gold)
            f = f_beta(c, p, g, beta)
            if (chosen is None or f > chosen[0] or (f == chosen[0] and c > chosen[1])
                    or (f == chosen[0] and c == chosen[1] and p + beta * beta * g < chosen[2] + beta * beta * chosen[3])):
                chosen = (f, c, p, g, annotator, len(correct), len(sequence), len(gold))
            if verbose:
                print(f"sentence {number}, annotator {annotator}: system edits {list(reversed(sequence))}, "
                      f"gold {gold}, correct {correct}")
        if verbose:
            print(f">> chosen annotator for sentence {number}: {chosen[4]}")
        total_correct += chosen[5]
        total_proposed += chosen[6]
        total_gold += chosen[7]
    precision = total_correct / total_proposed if total_proposed else 1.0
    recall = total_correct / total_gold if total_gold else 1.0
    try:
        f = (1 + beta * beta) * precision * recall / (beta * beta * precision + recall)
    except ZeroDivisionError:
        f = 0.0
    return precision, recall, f, total_correct, total_proposed, total_gold


def generate_hypotheses(path):
    """The hypotheses of a fairseq-generate log (its H-<id> lines), in sentence id order."""
    hypotheses = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                fields = line.rstrip("\n").split("\t")
                hypotheses[int(fields[0][2:])] = fields[2] if len(fields) > 2 else ""
    if sorted(hypotheses) != list(range(len(hypotheses))):
        raise ValueError(f"{path}: the hypotheses' ids are not 0..{len(hypotheses) - 1}")
    return [hypotheses[i] for i in range(len(hypotheses))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", help="system output, one tokenized sentence per line")
    parser.add_argument("gold", help="the M2 file: source sentences and gold edits")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--max-unchanged-words", type=int, default=2)
    parser.add_argument("--ignore-whitespace-casing", action="store_true",
                        help="ignore edits that only change white space or case")
    parser.add_argument("--fairseq-generate", action="store_true",
                        help="SYSTEM is a fairseq-generate log: score its H- lines in id order")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        sources, golds = load_annotation(args.gold)
        if args.fairseq_generate:
            system = generate_hypotheses(args.system)
        else:
            with open(args.system, encoding="utf-8") as f:
                system = [line.strip() for line in f]
        p, r, f, *_ = score(system, sources, golds, args.beta, args.max_unchanged_words,
                            args.ignore_whitespace_casing, args.verbose)
    except (OSError, ValueError) as error:
        sys.exit(f"m2scorer.py: {error}")
    print(f"Precision   : {p:.4f}")
    print(f"Recall      : {r:.4f}")
    print(f"F_{args.beta:.1f}       : {f:.4f}")


if __name__ == "__main__":
    main()
