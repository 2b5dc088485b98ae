package phonehome

import "testing"

func TestURLContract(t *testing.T) {
	t.Parallel()
	const token = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd"
	u := URL("http://10.0.2.2:8787//", token)
	if u != "http://10.0.2.2:8787/v1/phone-home/"+token {
		t.Fatalf("URL %q", u)
	}
	if got := TokenOf(u); got != token {
		t.Errorf("token %q", got)
	}
	if got := TokenOf("http://old.example/hook/" + token); got != token {
		t.Errorf("token of a URL without the prefix: %q", got)
	}
	if !Under(u, "http://10.0.2.2:8787") || !Under(u, "http://10.0.2.2:8787/") || Under(u, "http://10.0.2.2:8788") {
		t.Error("Under does not match the base URL")
	}
	if got := Redact(u); got != "http://10.0.2.2:8787/v1/phone-home/<token>" {
		t.Errorf("redacted %q", got)
	}
	if got := Redact("http://10.0.2.2:8787/v1/phone-home/"); got != "http://10.0.2.2:8787/v1/phone-home/" {
		t.Errorf("a URL without a token redacts to %q", got)
	}
}
