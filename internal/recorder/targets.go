package recorder

// TargetsAlive reports whether a target process of the run is still
// alive (attach.Sampler.TargetsAlive: the -p pids and what they forked);
// always true without Config.Sampling.PIDs or with Config.Source, and
// once Run has returned (the sampler is closing then).
func (r *Recorder) TargetsAlive() (bool, error) {
	if r.sampler == nil {
		return true, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ran {
		return true, nil
	}
	return r.sampler.TargetsAlive()
}
