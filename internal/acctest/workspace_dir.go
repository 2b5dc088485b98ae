package acctest

// Dir is the workspace's working directory, for files beside main.tf (a
// query's .tfquery.hcl, a generated configuration).
func (w *Workspace) Dir() string { return w.dir }
