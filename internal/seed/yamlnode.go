package seed

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The documents are built as yaml.Node trees so key order is fixed and every
// scalar gets a style that PyYAML (YAML 1.1, what cloud-init parses with)
// reads back as the same string: a MAC such as 52:54:00:12:34:56 is a
// base-60 integer to YAML 1.1, "0644" an octal one, "on" a boolean.

// plainStart matches strings whose first character cannot start a YAML 1.1
// number, timestamp or special value; the encoder itself still quotes what
// YAML 1.2 cannot take plain (": ", " #", leading indicators...).
var plainStart = regexp.MustCompile(`^[A-Za-z_/]`)

var yaml11Words = map[string]bool{
	"y": true, "n": true, "yes": true, "no": true, "true": true, "false": true,
	"on": true, "off": true, "null": true,
}

func ystr(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	switch {
	case strings.Contains(s, "\n") && printableText(s) && !strings.HasPrefix(s, "\n"):
		// A literal block cannot start with a newline: yaml.v3 writes it
		// so that one is lost on reading; double quotes keep it.
		n.Style = yaml.LiteralStyle
	case strings.HasPrefix(s, "\n"):
		n.Style = yaml.DoubleQuotedStyle
	case !printableText(s):
		n.Style = yaml.DoubleQuotedStyle
	case plainStart.MatchString(s) && !yaml11Words[strings.ToLower(s)] && strings.TrimSpace(s) == s:
		// plain (yaml.v3 falls back to quoting when plain is impossible)
	default:
		n.Style = yaml.SingleQuotedStyle
	}
	return n
}

// printableText reports whether s can go into a block or single-quoted
// scalar unchanged: no control characters other than newline and tab, no
// carriage returns, no trailing spaces on lines (which editors and some
// emitters mangle).
func printableText(s string) bool {
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || r == 0xfeff || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasSuffix(line, " ") || strings.HasSuffix(line, "\t") {
			return false
		}
	}
	return true
}

func ybool(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func yint(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)}
}

func yseq(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func ystrs(ss []string) *yaml.Node {
	n := yseq()
	for _, s := range ss {
		n.Content = append(n.Content, ystr(s))
	}
	return n
}

// ymap is an ordered mapping under construction.
type ymap struct{ n *yaml.Node }

func newMap() ymap { return ymap{&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}} }

func (m ymap) set(key string, v *yaml.Node) ymap {
	m.n.Content = append(m.n.Content, ystr(key), v)
	return m
}

func (m ymap) node() *yaml.Node { return m.n }

func (m ymap) empty() bool { return len(m.n.Content) == 0 }

// encodeYAML renders a node as a YAML document with two-space indentation.
func encodeYAML(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
