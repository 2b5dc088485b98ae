package image

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
)

// maxSumsLine bounds one line of a checksum file.
const maxSumsLine = 64 << 10

// bsdLine matches a BSD-style ("tagged") checksum line: "SHA256 (name) = hex".
var bsdLine = regexp.MustCompile(`^([A-Za-z0-9-]+) ?\((.*)\) ?= ?([0-9A-Fa-f]+)$`)

// sumsEntry is one usable line of a checksum file.
type sumsEntry struct {
	name   string
	digest Digest
	// alg is the algorithm as named or implied by the line; digest is zero
	// when it is not one this package supports (md5, sha1, ...).
	alg string
}

// ParseSums finds the digest of fileName in a vendor checksum file such as
// SHA256SUMS, SHA512SUMS or Fedora's CHECKSUM.
//
// It understands GNU coreutils lines ("<hex>  name" and "<hex> *name") and
// BSD-style tagged lines ("SHA256 (name) = <hex>"), and ignores blank lines,
// comments ("# ..."), lines it does not recognise and the wrapping of an
// OpenPGP clear-signed file ("-----BEGIN PGP SIGNED MESSAGE-----", "Hash:"
// armor headers, the signature block); dash-escaped lines are unescaped. It
// does not check the signature: Fetch does, given signing keys (see
// Request.ChecksumSigningKeys), and then passes only the signed text here.
// The algorithm comes from the BSD tag or,
// for GNU lines, from the length of the hex digest (64: sha256, 128: sha512).
//
// Names in the file may carry a leading "./" or a directory path; they match
// fileName when equal to it, or else when their base names are equal. When
// the file lists the name with both sha256 and sha512, sha512 is returned.
// The error for a name that is not listed names the file name looked for and
// up to five of the names present.
func ParseSums(r io.Reader, fileName string) (Digest, error) {
	want := cleanSumsName(fileName)
	wantBase := path.Base(want)
	if want == "" || wantBase == "." || wantBase == "/" {
		return Digest{}, fmt.Errorf("checksum file: no file name to look for (got %q)", fileName)
	}

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSumsLine)
	var (
		exact, base []sumsEntry
		names       []string
		seen        = map[string]bool{}
		inArmor     bool // in the armor headers after BEGIN PGP SIGNED MESSAGE
		inSig       bool // in the signature block
	)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case inSig:
			if strings.HasPrefix(line, "-----END PGP SIGNATURE-----") {
				inSig = false
			}
			continue
		case inArmor:
			if strings.TrimSpace(line) == "" {
				inArmor = false
			}
			continue
		case strings.HasPrefix(line, "-----BEGIN PGP SIGNED MESSAGE-----"):
			inArmor = true
			continue
		case strings.HasPrefix(line, "-----BEGIN PGP SIGNATURE-----"):
			inSig = true
			continue
		}
		line = strings.TrimPrefix(line, "- ") // dash-escaped line in a clear-signed text
		e, ok := parseSumsLine(line)
		if !ok {
			continue
		}
		if !seen[e.name] {
			seen[e.name] = true
			names = append(names, e.name)
		}
		name := cleanSumsName(e.name)
		switch {
		case name == want:
			exact = append(exact, e)
		case path.Base(name) == wantBase:
			base = append(base, e)
		}
	}
	if err := sc.Err(); err != nil {
		return Digest{}, fmt.Errorf("reading checksum file: %w", err)
	}
	matches := exact
	if len(matches) == 0 {
		matches = base
	}
	if len(matches) == 0 {
		if len(names) == 0 {
			return Digest{}, fmt.Errorf("checksum file has no checksum lines (looked for %q); is it a SHA256SUMS-style file?", wantBase)
		}
		return Digest{}, fmt.Errorf("checksum file has no entry for %q; it lists %s", wantBase, listNames(names, 5))
	}
	return pickSum(matches, wantBase)
}

// pickSum chooses the digest among the lines naming the wanted file: the
// strongest supported algorithm, and all lines of that algorithm must agree.
func pickSum(matches []sumsEntry, name string) (Digest, error) {
	var best Digest
	var unsupported []string
	for _, e := range matches {
		if e.digest.IsZero() {
			unsupported = append(unsupported, e.alg)
			continue
		}
		switch {
		case best.IsZero() || e.digest.Algorithm == SHA512 && best.Algorithm == SHA256:
			best = e.digest
		case e.digest.Algorithm == best.Algorithm && e.digest.Hex != best.Hex:
			return Digest{}, fmt.Errorf("checksum file lists %q more than once with different %s digests (%s and %s)",
				name, best.Algorithm, best.Hex, e.digest.Hex)
		}
	}
	if best.IsZero() {
		return Digest{}, fmt.Errorf("checksum file lists %q only with unsupported algorithm %s; use a SHA256SUMS or SHA512SUMS file",
			name, strings.Join(unsupported, ", "))
	}
	return best, nil
}

// parseSumsLine parses one line of a checksum file.
func parseSumsLine(line string) (sumsEntry, bool) {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(t, "#") {
		return sumsEntry{}, false
	}
	if m := bsdLine.FindStringSubmatch(t); m != nil {
		alg := strings.ToLower(strings.ReplaceAll(m[1], "-", ""))
		hx := strings.ToLower(m[3])
		e := sumsEntry{name: m[2], alg: alg}
		if n := hexLen(alg); n != 0 {
			if len(hx) != n {
				return sumsEntry{}, false
			}
			e.digest = Digest{Algorithm: alg, Hex: hx}
		}
		return e, true
	}
	// GNU coreutils: "<hex> <mode><name>", mode ' ' (text) or '*' (binary);
	// a leading backslash marks a name with escaped "\\" and "\n".
	escaped := strings.HasPrefix(t, "\\")
	if escaped {
		t = t[1:]
	}
	i := strings.IndexAny(t, " \t")
	if i <= 0 {
		return sumsEntry{}, false
	}
	hx := strings.ToLower(t[:i])
	if !isLowerHex(hx) {
		return sumsEntry{}, false
	}
	name := t[i+1:]
	if strings.HasPrefix(name, " ") || strings.HasPrefix(name, "*") {
		name = name[1:]
	}
	if name == "" {
		return sumsEntry{}, false
	}
	if escaped {
		name = strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(name)
	}
	e := sumsEntry{name: name}
	switch len(hx) {
	case 64:
		e.alg, e.digest = SHA256, Digest{Algorithm: SHA256, Hex: hx}
	case 128:
		e.alg, e.digest = SHA512, Digest{Algorithm: SHA512, Hex: hx}
	case 32:
		e.alg = "md5"
	case 40:
		e.alg = "sha1"
	case 56:
		e.alg = "sha224"
	case 96:
		e.alg = "sha384"
	default:
		return sumsEntry{}, false
	}
	return e, true
}

// cleanSumsName strips leading "./" and "*" from a name in a checksum file
// and uses forward slashes.
func cleanSumsName(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), `\`, "/")
	for strings.HasPrefix(s, "./") {
		s = strings.TrimLeft(s[2:], "/")
	}
	return s
}

// listNames formats up to limit names for an error message.
func listNames(names []string, limit int) string {
	var b strings.Builder
	for i, n := range names {
		if i == limit {
			fmt.Fprintf(&b, ", and %d more", len(names)-limit)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	return b.String()
}
