package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The bounds the operator's planner keeps on setting keys (src/plan/limits.rs), checked again
// here before Helm's strvals parser reads them: strvals takes a list index up to 65536 and
// allocates the whole list at once, so `k[65535]=x` alone would build 65,536 elements.
const (
	// maxListIndex is the largest list index a key may hold.
	maxListIndex = 1024
	// maxListElements bounds the elements the keys of one request may make lists of, in all.
	maxListElements = 10000
)

// listIndex is one list index of a key, with the path of the list it indexes (the key up to
// its '['); keys naming the same path share its elements.
type listIndex struct {
	path  string
	index int
}

// checkListIndexes refuses `--set` expressions whose keys hold a list index over maxListIndex,
// or whose lists would hold over maxListElements elements in all.
func checkListIndexes(sets []string) error {
	lists := map[string]int{}
	for _, set := range sets {
		for _, ix := range listIndexes(set) {
			if ix.index > maxListIndex {
				return fmt.Errorf("list index [%d] after %q is greater than the maximum of %d; use values instead", ix.index, ix.path, maxListIndex)
			}
			lists[ix.path] = max(lists[ix.path], ix.index+1)
		}
	}
	total := 0
	for _, n := range lists {
		total += n
	}
	if total > maxListElements {
		return fmt.Errorf("the keys make lists of %d elements in all, more than the maximum of %d; use values instead", total, maxListElements)
	}
	return nil
}

// listIndexes reads the key of one `key=value` expression as strvals does: up to the first
// '=' or ',', a backslash taking the next rune literally (inside brackets too), an index being
// what stands between '[' and ']', read by strconv.Atoi. Indexes strvals refuses itself
// (negative, not a number) are left out; one too large to parse counts as math.MaxInt.
func listIndexes(expr string) []listIndex {
	var out []listIndex
	runes := []rune(expr)
	for i := 0; i < len(runes); i++ {
		switch runes[i] {
		case '\\':
			i++
		case '=', ',':
			return out
		case '[':
			path := string(runes[:i])
			var index []rune
			for i++; i < len(runes) && runes[i] != ']'; i++ {
				if runes[i] == '\\' && i+1 < len(runes) {
					i++
				}
				index = append(index, runes[i])
			}
			if n, ok := parseIndex(string(index)); ok {
				out = append(out, listIndex{path, n})
			}
		}
	}
	return out
}

// parseIndex reads an index as strvals does (strconv.Atoi); false when strvals would refuse it.
func parseIndex(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	switch {
	case errors.Is(err, strconv.ErrRange) && n > 0:
		return math.MaxInt, true
	case err != nil || n < 0:
		return 0, false
	}
	return n, true
}
