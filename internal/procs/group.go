package procs

import "time"

// Start starts the group's command, as the package's Start does, and puts
// it in its group: call Done after its Wait, and Close once the group is
// done with. When it fails, no process is left running.
func (g *Group) Start() error {
	if err := Start(g.cmd); err != nil {
		return err
	}
	if err := g.Started(); err != nil {
		_ = g.cmd.Wait() // Started killed it
		Done(g.cmd)
		return err
	}
	return nil
}

// WaitGone polls until no living process is left in the group, or the
// deadline passes: a killed process dies when the system gets to it.
func (g *Group) WaitGone(deadline time.Time) {
	for pause := 100 * time.Microsecond; g.hasLiving(); pause = min(2*pause, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
	}
}
