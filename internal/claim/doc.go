// Package claim makes taking a device on a host atomic across applies,
// workspaces and machines, through the libvirt connection alone: no
// daemon, no shared backend. It is the protocol and a small Host
// interface; internal/virt implements the host side on its Client.
//
// # The protocol
//
// A claim on device D (a GPU, by its lead PCI function) is a storage
// volume named from D's address, kohaku-claim-0000_3b_00_0, in the host's
// directory pool kohaku-claims (/var/lib/kohaku/claims, defined, built and
// started on first use; a define that finds the pool there is success).
// Its content is a small JSON record: the holder VM's name and domain UUID,
// the workspace, a random token and the creation time.
//
// Take creates that volume. libvirt refuses to create a volume whose name
// exists in the pool, under the pool's lock, so of any number of applies
// racing for D exactly one creates it; the others read it and fail with a
// *ClaimedError naming the holder, before they have made anything. The
// host side creates the volume with its content in one call (the record
// is uploaded to a scratch volume, then the claim is made as its clone),
// so a claim is never seen empty. Release deletes the volume, only when
// the caller is its holder.
//
// A claim names the UUID the VM's domain will have: the create chooses it
// before claiming and defines the domain with it. A device that a domain
// other than the holder's has as a hostdev (attached by hand, `virsh
// attach-device`) is taken whatever the claims say; Take refuses it and
// Annotate reports it in use "(given by hand, no claim)".
//
// # Failure modes
//
//   - Crash between claim and domain define: the claim names a VM whose
//     domain does not exist. While the claim is younger than StaleAfter
//     (10 minutes by default: far longer than any create takes from claim
//     to define, which is its first host change after the claims) it is
//     taken to be a VM being created, and others fail with "which another
//     apply is creating". Once older, with still no domain of that UUID on
//     the host, it is stale. The apply that made it recognises its own
//     claim by the VM's UUID (a retried create takes it again without
//     change); any other apply may take a stale claim over. Ages compare
//     the record's creation time with the taker's clock, so clocks more
//     than a few minutes apart shorten or lengthen the wait, never make a
//     live claim (one whose domain exists) stale.
//   - A VM deleted by hand: its claim is stale (the domain is gone) once
//     old enough, and the next apply that wants the device takes it over
//     and says so (Taken.Message).
//   - Two applies taking over the same stale claim: deleting and creating
//     a volume are two calls, and a delete is not conditional, so a
//     takeover is reserved first: only the apply that creates the volume
//     kohaku-claim-<addr>.takeover-<stale token> may delete the claim, and
//     it checks after reserving that the claim still has that token. The
//     other apply fails (the device is being taken over) or, when it comes
//     after the first one finished, finds the new claim and fails naming
//     its holder. If the create after the delete fails because a fresh
//     claimer came in between, that claimer won. A reservation left by a
//     crashed apply is stale in turn after StaleAfter, and the next
//     attempt reserves .takeover-<token>-2, and so on.
//   - What is not covered: an apply stalled for longer than StaleAfter
//     between its claim and its define can find its claim taken over; its
//     define would then go ahead on a device another VM holds. The create
//     takes its claims again right before it defines (vmlife's
//     Acquired.Confirm; Take returns Already while they are still its
//     own), which narrows that to the window of one define call.
//   - A connection lost after the claim was made but before libvirt
//     answered: the apply does not know it holds the claim; taking it
//     again returns Already, since the claim names its VM's UUID. A
//     scratch volume (kohaku-scratch-*) may be left in the pool; it is
//     not a claim and nothing reads it.
//   - A volume in the pool named like a claim but holding something else
//     is reported (ForeignVolumeError) and never deleted.
//
// # Quarantine
//
// A GPU given back by a VM is reset before another VM may have it; one
// that cannot be reset is held back until an operator clears it. The
// marker is a volume beside the claim, kohaku-claim-<addr>.quarantine,
// whose JSON says why, since when and which VM gave the GPU back
// (Quarantine). The giver creates it BEFORE it releases its claim, and
// Take, after it has created its own claim, looks for the marker and,
// when there is one, deletes its claim again and fails with a
// *QuarantinedError (it also looks before creating, so that the common
// case makes nothing). That order needs no change to how claims are
// made: a taker's create succeeds only once the giver's claim is gone,
// and the giver deleted it only after its marker existed, so every taker
// whose claim was created after the release finds the marker; one whose
// claim was created before the giver quarantined is impossible, since the
// giver held the claim all that time. A stale claim taken over is checked
// the same way. ClearQuarantine (the kohaku_gpu_reset action, once its
// reset succeeds) deletes the marker. A giver that cannot write its
// marker keeps its claim and reports it (the claim is stale after
// StaleAfter, and can then be taken over: the one gap).
//
// vGPUs (mdev) need no claim: the kernel counts a type's instances and
// refuses one too many when the mdev is created.
package claim
