package provider

import (
	"encoding/json"

	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// privateGPUGroups is the private-state key under which create and update
// record, per gpus entry, the host functions passed through for it, so that
// Read can attribute them to the entry without asking libvirt again.
const privateGPUGroups = "gpu_groups"

// attributeHostdevs splits a domain's hostdevs between gpus and hostdevs, as
// Read reports them: a prior gpus entry stays when all the functions recorded
// for it are in the domain (a missing one shows as a change, which apply
// restores), and those functions are not reported again as hostdevs unless
// hostdevs names them too. Everything else is a hostdev, in the prior
// spelling when the prior hostdevs name it.
func attributeHostdevs(observed, priorGPUs, priorRaw []string, groups gpuGroups) (gpus, raw []string) {
	have := map[string]bool{}
	for _, h := range observed {
		have[vmlife.CanonicalPCI(h)] = true
	}
	claimed := map[string]bool{}
	for _, g := range priorGPUs {
		fns := groups.Members(g)
		all := true
		for _, f := range fns {
			all = all && have[f]
		}
		if !all {
			continue
		}
		gpus = append(gpus, g)
		for _, f := range fns {
			claimed[f] = true
		}
	}
	rawByAddr := map[string]string{}
	for _, h := range priorRaw {
		rawByAddr[vmlife.CanonicalPCI(h)] = h
	}
	done := map[string]bool{}
	for _, h := range observed {
		k := vmlife.CanonicalPCI(h)
		if done[k] {
			continue
		}
		done[k] = true
		switch {
		case rawByAddr[k] != "":
			raw = append(raw, rawByAddr[k])
		case !claimed[k]:
			raw = append(raw, h)
		}
	}
	return gpus, raw
}

// gpuGroupsFromPrivate reads the record create and update leave.
func gpuGroupsFromPrivate(b []byte) gpuGroups {
	g := gpuGroups{}
	if len(b) > 0 {
		_ = json.Unmarshal(b, &g) // a record that does not parse is no record
	}
	return g
}

// privateGroups is the record to store; nil (which removes the key) when empty.
func privateGroups(g gpuGroups) []byte {
	if len(g) == 0 {
		return nil
	}
	b, _ := json.Marshal(g)
	return b
}
