package seed

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/textproto"
	"regexp"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// userInput is the user's user data as given and as cloud-init will see it.
type userInput struct {
	// raw is the data as given (after base64 decoding); it goes into the
	// seed unchanged when there is nothing to merge it with.
	raw []byte
	// plain is raw, gunzipped when raw is gzip.
	plain   []byte
	gzipped bool
	// mime is cloud-init's own test: "mime-version:" in the first 4096
	// bytes (case-insensitive) after decompression.
	mime bool
}

// inclusionTypes is cloud-init's table of user-data prefixes
// (cloudinit/handlers/__init__.py INCLUSION_TYPES_MAP), longest first, the
// order cloud-init matches them in.
var inclusionTypes = []struct{ prefix, ctype string }{
	{"#cloud-config-archive", "text/cloud-config-archive"},
	{"#cloud-config-jsonp", "text/cloud-config-jsonp"},
	{"## template: jinja", "text/jinja2"},
	{"#cloud-boothook", "text/cloud-boothook"},
	{"#include-once", "text/x-include-once-url"},
	{"#part-handler", "text/part-handler"},
	{"#cloud-config", "text/cloud-config"},
	{"#include", "text/x-include-url"},
	{"#!", "text/x-shellscript"},
}

// sniffType returns the content type cloud-init infers from the start of a
// payload, or "" when it infers none.
func sniffType(payload []byte) string {
	if !utf8.Valid(payload) {
		return ""
	}
	p := bytes.TrimLeft(payload, " \t\r\n\v\f")
	if len(p) > 64 {
		p = p[:64]
	}
	lc := strings.ToLower(string(p))
	for _, t := range inclusionTypes {
		if strings.HasPrefix(lc, t.prefix) {
			return t.ctype
		}
	}
	return ""
}

// gzip content types cloud-init decompresses (user_data.py DECOMP_TYPES).
var decompTypes = map[string]bool{
	"application/gzip":              true,
	"application/gzip-compressed":   true,
	"application/gzipped":           true,
	"application/x-compress":        true,
	"application/x-compressed":      true,
	"application/x-gunzip":          true,
	"application/x-gzip":            true,
	"application/x-gzip-compressed": true,
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// gunzipCapped decompresses at most limit bytes; more is an error.
func gunzipCapped(b []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(out) > limit {
		return nil, errTooLarge
	}
	return out, nil
}

var errTooLarge = errors.New("too large")

func looksMIME(b []byte) bool {
	head := b
	if len(head) > 4096 {
		head = head[:4096]
	}
	return bytes.Contains(bytes.ToLower(head), []byte("mime-version:"))
}

// decodeUserData turns the Spec's user data fields into a userInput, or
// returns nil when there is none.
func decodeUserData(s *Spec, p *problems) *userInput {
	var raw []byte
	path := "user_data"
	switch {
	case len(s.UserData) > 0 && s.UserDataBase64 != "":
		p.add("user_data_base64", "conflicts with user_data: give the user data once, either as text or as base64", `user_data_base64 = data.cloudinit_config.x.rendered`)
		return nil
	case len(s.UserData) > 0:
		raw = s.UserData
	case s.UserDataBase64 != "":
		path = "user_data_base64"
		clean := strings.Map(func(r rune) rune {
			switch r {
			case ' ', '\t', '\r', '\n':
				return -1
			}
			return r
		}, s.UserDataBase64)
		if base64.StdEncoding.DecodedLen(len(clean)) > MaxUserDataBytes+3 {
			p.add(path, fmt.Sprintf("decodes to more than %d bytes (MaxUserDataBytes)", MaxUserDataBytes), "keep user data under 16 MiB; put large files on a shared folder")
			return nil
		}
		dec, err := base64.StdEncoding.DecodeString(clean)
		if err != nil {
			dec, err = base64.RawStdEncoding.DecodeString(clean)
		}
		if err != nil {
			p.addErr(path, "is not valid standard base64: "+err.Error(), `base64encode(file("user-data.yaml"))`, err)
			return nil
		}
		raw = dec
	default:
		return nil
	}
	if len(raw) > MaxUserDataBytes {
		p.add(path, fmt.Sprintf("is %d bytes, more than %d (MaxUserDataBytes)", len(raw), MaxUserDataBytes), "keep user data under 16 MiB; put large files on a shared folder")
		return nil
	}
	u := &userInput{raw: raw, plain: raw}
	if isGzip(raw) {
		plain, err := gunzipCapped(raw, MaxUserDataBytes)
		switch {
		case errors.Is(err, errTooLarge):
			p.add(path, fmt.Sprintf("decompresses to more than %d bytes (MaxUserDataBytes)", MaxUserDataBytes), "keep user data under 16 MiB; put large files on a shared folder")
			return nil
		case err != nil:
			p.addErr(path, "starts like gzip (1f 8b) but does not decompress: "+err.Error(), "gzip-compress the whole document, or pass it uncompressed", err)
			return nil
		}
		u.plain, u.gzipped = plain, true
	}
	u.mime = looksMIME(u.plain)
	checkUserDataFormat(u, path, p)
	checkUserData(u, path, p)
	return u
}

// mimeDoc is a parsed MIME document: top-level headers and where its body
// starts.
type mimeDoc struct {
	header    textproto.MIMEHeader
	bodyStart int
	mediaType string
	params    map[string]string
}

// parseMIMEHeader reads the header block of a MIME entity.
func parseMIMEHeader(b []byte) (*mimeDoc, error) {
	// Find the blank line ending the header block.
	end, sep := -1, 0
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			break
		}
		line := b[i : i+j]
		if len(bytes.TrimRight(line, "\r")) == 0 {
			end, sep = i, j+1
			break
		}
		i += j + 1
	}
	if end < 0 {
		return nil, errors.New("no blank line after the MIME headers")
	}
	tr := textproto.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(b[:end]), strings.NewReader("\r\n"))))
	h, err := tr.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	d := &mimeDoc{header: h, bodyStart: end + sep, mediaType: "text/plain"}
	if ct := h.Get("Content-Type"); ct != "" {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil {
			return nil, fmt.Errorf("Content-Type %q: %w", ct, err)
		}
		d.mediaType, d.params = mt, params
	}
	return d, nil
}

// mimePart is one leaf part of a MIME document, decoded the way cloud-init
// decodes it.
type mimePart struct {
	index   int // 1-based, in document order
	ctype   string
	payload []byte
}

// walkMIME returns the leaf parts of a MIME document (cloud-init walks
// nested multiparts too), with transfer encodings and gzip undone.
func walkMIME(doc []byte) ([]mimePart, error) {
	var parts []mimePart
	var walk func(b []byte, depth int) error
	walk = func(b []byte, depth int) error {
		if depth > 8 {
			return errors.New("MIME nesting deeper than 8 levels")
		}
		d, err := parseMIMEHeader(b)
		if err != nil {
			return err
		}
		body := b[d.bodyStart:]
		if strings.HasPrefix(d.mediaType, "multipart/") {
			boundary := d.params["boundary"]
			if boundary == "" {
				return fmt.Errorf("%s without a boundary parameter", d.mediaType)
			}
			mr := multipart.NewReader(bytes.NewReader(body), boundary)
			for {
				part, err := mr.NextRawPart()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				content, err := io.ReadAll(part)
				truncated := errors.Is(err, io.ErrUnexpectedEOF)
				if err != nil && !truncated {
					return err
				}
				var hb bytes.Buffer
				for k, vs := range part.Header {
					for _, v := range vs {
						fmt.Fprintf(&hb, "%s: %s\r\n", k, v)
					}
				}
				hb.WriteString("\r\n")
				hb.Write(content)
				if err := walk(hb.Bytes(), depth+1); err != nil {
					return err
				}
				if truncated {
					// No closing delimiter: Python's email parser (and so
					// cloud-init) takes the rest as the last part.
					return nil
				}
			}
		}
		payload, err := decodeTransfer(body, d.header.Get("Content-Transfer-Encoding"))
		if err != nil {
			return err
		}
		ctype := d.mediaType
		if decompTypes[ctype] {
			if p, err := gunzipCapped(payload, MaxUserDataBytes); err == nil {
				payload, ctype = p, "text/plain"
			}
		}
		if ctype == "text/plain" || ctype == "text/x-not-multipart" || ctype == "text/x-shellscript" {
			if t := sniffType(payload); t != "" {
				ctype = t
			}
		}
		parts = append(parts, mimePart{index: len(parts) + 1, ctype: ctype, payload: payload})
		return nil
	}
	if err := walk(doc, 0); err != nil {
		return nil, err
	}
	return parts, nil
}

func decodeTransfer(body []byte, cte string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "base64":
		clean := bytes.Map(func(r rune) rune {
			switch r {
			case ' ', '\t', '\r', '\n':
				return -1
			}
			return r
		}, body)
		return base64.StdEncoding.DecodeString(string(clean))
	case "quoted-printable":
		return io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
	default:
		return body, nil
	}
}

var yamlLineRe = regexp.MustCompile(`^yaml: (line \d+: )?`)

// checkCloudConfigYAML parses a #cloud-config document and reports the line
// of the first YAML error, counted from 1 at the document's first line.
func checkCloudConfigYAML(doc []byte) (line int, msg string, err error) {
	var n yaml.Node
	if err := yaml.Unmarshal(doc, &n); err != nil {
		return yamlErrorLine(doc), yamlLineRe.ReplaceAllString(err.Error(), ""), err
	}
	if len(n.Content) == 0 {
		return 0, "", nil // an empty cloud-config is accepted (and ignored) by cloud-init
	}
	root := n.Content[0]
	if root.Kind != yaml.MappingNode {
		return root.Line, "the top level must be a mapping of module keys (cloud-init ignores anything else)", errors.New("not a mapping")
	}
	return 0, "", nil
}

// checkUserData validates the parts cloud-init will parse as YAML.
func checkUserData(u *userInput, path string, p *problems) {
	example := "#cloud-config\\nruncmd:\\n  - echo hello"
	if !u.mime {
		if sniffType(u.plain) != "text/cloud-config" {
			return
		}
		if line, msg, err := checkCloudConfigYAML(u.plain); err != nil {
			p.addErr(path, fmt.Sprintf("#cloud-config is not valid YAML at line %d: %s", line, msg), example, err)
		}
		return
	}
	parts, err := walkMIME(u.plain)
	if err != nil {
		p.addErr(path, "looks like MIME (has a MIME-Version header in its first 4096 bytes) but does not parse: "+err.Error(), "Content-Type: "+
			"multipart/mixed; boundary=\"b\"\\nMIME-Version: 1.0\\n\\n--b\\n...\\n--b--", err)
		return
	}
	for _, part := range parts {
		if part.ctype != "text/cloud-config" {
			continue
		}
		if line, msg, err := checkCloudConfigYAML(part.payload); err != nil {
			p.addErr(path, fmt.Sprintf("MIME part %d (text/cloud-config) is not valid YAML at line %d of the part: %s", part.index, line, msg), example, err)
		}
	}
}

// yamlErrorLine finds the line that makes a document unparsable. yaml.v3's
// own "line N" is the line where the enclosing block started (0-based for
// parser errors), not where the problem is, so this searches instead for
// the first line whose addition turns a parsable prefix of the document
// into an unparsable one (a binary search: about log2(lines) parses).
func yamlErrorLine(doc []byte) int {
	var ends []int // ends[k] is the length of the first k+1 lines
	for i, c := range doc {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(doc) {
		ends = append(ends, len(doc))
	}
	parses := func(k int) bool { // the first k lines
		if k == 0 {
			return true
		}
		var n yaml.Node
		return yaml.Unmarshal(doc[:ends[k-1]], &n) == nil
	}
	lo, hi := 0, len(ends) // parses(lo), !parses(hi)
	for round := 0; ; round++ {
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if parses(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		// A prefix that ends inside a multi-line flow collection or quoted
		// scalar fails without an error in it: if a slightly longer prefix
		// parses again, the real error is further down.
		again := -1
		// Bounded: at most 8 rounds of 64 look-ahead parses, and none for
		// documents over 256 KiB, where that would take seconds.
		for k := hi + 1; k < len(ends) && k <= hi+64 && round < 8 && len(doc) <= 256<<10; k++ {
			if parses(k) {
				again = k
				break
			}
		}
		if again < 0 {
			return hi
		}
		lo, hi = again, len(ends)
	}
}
