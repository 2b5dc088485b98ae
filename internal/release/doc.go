// Package release builds Kohaku's release artifacts in the layout the
// Terraform Registry and goreleaser use (one zip per platform, the registry
// manifest, SHA256SUMS and its detached OpenPGP signature), and lays out a
// provider network mirror (Terraform's and OpenTofu's provider network
// mirror protocol) and an implied local mirror from them. It needs only the
// Go toolchain: no goreleaser, no gpg.
package release
