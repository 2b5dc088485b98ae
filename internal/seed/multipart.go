package seed

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// combineUserData returns the user-data document cloud-init reads.
//
//   - Only generated cloud-config: the "#cloud-config" document itself.
//   - Only user data: the user's bytes, unchanged (gzip included).
//   - Both: a MIME multipart document with the user's part(s) first, in
//     their own content types, and the generated text/cloud-config part last
//     with Merge-Type DefaultMergeType. cloud-init merges each cloud-config
//     part into what came before using that part's own merger, so ours,
//     coming last, decides: lists are prepended (our runcmd, write_files,
//     users... run before the user's), dicts are merged recursively and the
//     user's scalar values win. A user document that already is MIME
//     multipart gets our part appended before its closing delimiter (its
//     bytes are otherwise untouched, gzip aside: a merged document is
//     written uncompressed).
func combineUserData(u *userInput, generated []byte) ([]byte, bool, error) {
	switch {
	case u == nil && generated == nil:
		return nil, false, nil
	case u == nil:
		return generated, false, nil
	case generated == nil:
		return u.raw, false, nil
	}
	if u.mime {
		d, err := parseMIMEHeader(u.plain)
		if err != nil {
			return nil, false, fmt.Errorf("user data: %w", err)
		}
		if b := d.params["boundary"]; len(d.mediaType) > 10 && d.mediaType[:10] == "multipart/" && b != "" {
			return appendPart(u.plain, d.bodyStart, b, generated), true, nil
		}
		// A single MIME entity (headers + body) is already a valid part.
		return wrapParts([][]byte{u.plain}, generated), true, nil
	}
	return wrapParts([][]byte{userPart(u.plain)}, generated), true, nil
}

// userPart wraps a plain (non-MIME) user document as a MIME part whose
// content type is the one cloud-init would infer for it.
func userPart(plain []byte) []byte {
	ctype := sniffType(plain)
	if ctype == "" {
		ctype = "text/x-not-multipart" // what cloud-init calls a non-MIME document
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Content-Type: %s\n", ctype)
	b.WriteString("MIME-Version: 1.0\n")
	if utf8.Valid(plain) && bytes.IndexByte(plain, 0) < 0 && !bytes.Contains(plain, []byte("\r")) {
		b.WriteString("Content-Transfer-Encoding: 8bit\n\n")
		b.Write(plain)
		return b.Bytes()
	}
	b.WriteString("Content-Transfer-Encoding: base64\n\n")
	b.Write(wrap76(base64.StdEncoding.EncodeToString(plain), "\n"))
	return b.Bytes()
}

// generatedPart is the MIME part holding the generated cloud-config. It is
// sent base64-encoded only if its text contains the delimiter of the
// document it goes into.
func generatedPart(generated []byte, eol, boundary string) []byte {
	cte := "8bit"
	body := generated
	if boundary != "" && bytes.Contains(generated, []byte("--"+boundary)) {
		cte = "base64"
		body = wrap76(base64.StdEncoding.EncodeToString(generated), eol)
	}
	var b bytes.Buffer
	for _, h := range []string{
		`Content-Type: text/cloud-config; charset="utf-8"`,
		"MIME-Version: 1.0",
		"Content-Transfer-Encoding: " + cte,
		"Merge-Type: " + DefaultMergeType,
		`Content-Disposition: attachment; filename="` + GeneratedPartFilename + `"`,
	} {
		b.WriteString(h)
		b.WriteString(eol)
	}
	b.WriteString(eol)
	b.Write(body)
	return b.Bytes()
}

// wrap76 breaks base64 text into lines of 76 characters.
func wrap76(enc, eol string) []byte {
	var b bytes.Buffer
	for len(enc) > 76 {
		b.WriteString(enc[:76])
		b.WriteString(eol)
		enc = enc[76:]
	}
	b.WriteString(enc)
	return b.Bytes()
}

// boundaryFor derives a MIME boundary from the content it separates, so the
// output is reproducible, and makes sure no content line can be mistaken
// for it.
func boundaryFor(contents ...[]byte) string {
	h := sha256.New()
	for _, c := range contents {
		fmt.Fprintf(h, "%d:", len(c))
		h.Write(c)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	for i := 0; ; i++ {
		b := "==kohaku-" + sum[:32]
		if i > 0 {
			b += "-" + strconv.Itoa(i)
		}
		clash := false
		for _, c := range contents {
			if bytes.Contains(c, []byte("--"+b)) {
				clash = true
				break
			}
		}
		if !clash {
			return b
		}
	}
}

// wrapParts builds a new multipart/mixed document from complete parts
// (headers, blank line, body) followed by the generated part.
func wrapParts(parts [][]byte, generated []byte) []byte {
	gen := generatedPart(generated, "\n", "")
	boundary := boundaryFor(append(append([][]byte{}, parts...), gen)...)
	var b bytes.Buffer
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\n", boundary)
	b.WriteString("MIME-Version: 1.0\n\n")
	for _, p := range append(parts, gen) {
		b.WriteString("--" + boundary + "\n")
		b.Write(p)
		// The line break before a delimiter belongs to the delimiter, so
		// every body is kept byte for byte.
		b.WriteString("\n")
	}
	b.WriteString("--" + boundary + "--\n")
	return b.Bytes()
}

// appendPart inserts the generated part into an existing multipart
// document just before its closing delimiter, in the document's own line
// ending style. Without a closing delimiter it is added at the end.
func appendPart(doc []byte, bodyStart int, boundary string, generated []byte) []byte {
	closing := []byte("--" + boundary + "--")
	pos := -1
	for off := bodyStart; ; {
		i := bytes.Index(doc[off:], closing)
		if i < 0 {
			break
		}
		at := off + i
		if at == bodyStart || doc[at-1] == '\n' {
			pos = at
			break
		}
		off = at + len(closing)
	}
	eol := "\n"
	if pos >= 2 && doc[pos-2] == '\r' {
		eol = "\r\n"
	} else if pos < 0 && bytes.Contains(doc[bodyStart:], []byte("\r\n")) {
		eol = "\r\n"
	}
	var b bytes.Buffer
	b.Grow(len(doc) + len(generated) + 512)
	if pos < 0 {
		b.Write(doc)
		if len(doc) > 0 && doc[len(doc)-1] != '\n' {
			b.WriteString(eol)
		}
	} else {
		b.Write(doc[:pos])
	}
	b.WriteString("--" + boundary + eol)
	b.Write(generatedPart(generated, eol, boundary))
	b.WriteString(eol)
	if pos < 0 {
		b.Write(closing)
		b.WriteString(eol)
	} else {
		b.Write(doc[pos:])
	}
	return b.Bytes()
}
