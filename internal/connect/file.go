package connect

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

type fileValue struct {
	value string
	line  int
}

// readFile reads a YAML config file into dotted keys (nats.tls.cert) and
// their values. Problems name the file and line; unknown keys are problems
// too, so that a typo does not silently leave a setting at its default.
func readFile(path string) (map[string]fileValue, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, err)}
	}
	out := map[string]fileValue{}
	if len(doc.Content) == 0 {
		return out, nil // empty file
	}
	var problems []string
	walk(path, "", doc.Content[0], out, &problems)
	return out, problems
}

func walk(path, prefix string, n *yaml.Node, out map[string]fileValue, problems *[]string) {
	if n.Kind != yaml.MappingNode {
		*problems = append(*problems, fmt.Sprintf("%s:%d: %s: want a mapping of settings", path, n.Line, orTop(prefix)))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		switch {
		case isLeaf(key):
			switch v.Kind {
			case yaml.ScalarNode:
				out[key] = fileValue{v.Value, v.Line}
			case yaml.SequenceNode:
				var items []string
				for _, it := range v.Content {
					items = append(items, it.Value)
				}
				if key != "nats.url" {
					*problems = append(*problems, fmt.Sprintf("%s:%d: %s: want one value, not a list", path, v.Line, key))
					continue
				}
				out[key] = fileValue{strings.Join(items, ","), v.Line}
			default:
				*problems = append(*problems, fmt.Sprintf("%s:%d: %s: want a value", path, v.Line, key))
			}
		case isSection(key):
			walk(path, key, v, out, problems)
		default:
			*problems = append(*problems, fmt.Sprintf("%s:%d: unknown key %q (known: %s)", path, k.Line, key, strings.Join(fileKeys(), ", ")))
		}
	}
}

func orTop(prefix string) string {
	if prefix == "" {
		return "the file"
	}
	return prefix
}

func isLeaf(key string) bool {
	for _, s := range settings {
		if s.key == key {
			return true
		}
	}
	return false
}

func isSection(key string) bool {
	for _, s := range settings {
		if strings.HasPrefix(s.key, key+".") {
			return true
		}
	}
	return false
}

func fileKeys() []string {
	var ks []string
	for _, s := range settings {
		ks = append(ks, s.key)
	}
	sort.Strings(ks)
	return ks
}
