package protocol

// A session's order at the edge. Every request and notification of a
// session reaches it in the order the ingress read them: the ingress calls
// inOrder for each, on its one goroutine, and what inOrder runs sends one
// message to the session's mailbox without waiting — the mailbox is the
// order from there. Three requests must finish work outside the session
// before the next one may start: opening a session from its file (load,
// resume), closing it until its file is final (close, delete), and reading
// a stored session's file (fork of a session that is not open). While one
// of those runs there is no mailbox to hold the requests that follow, so
// the session's lane holds them, in order, and hands them on once it is
// done. The lane exists only while it holds something.
//
// What a lane holds is bounded by the requests pending (pending.go); a run
// of cancels is kept as one.

// lane is one session's requests waiting for an open or a close to end.
type lane struct {
	// held is set while work outside the session runs; draining while
	// the waiting requests are handed on.
	held, draining bool
	waiting        []func()
	// lastCancel is set when the last waiting request is a cancel.
	lastCancel bool
}

// inOrder runs serve now, or once the work that holds the session's lane
// has ended and the requests read before this one have been served. serve
// never blocks; it may call hold.
func (a *Agent) inOrder(sid string, serve func()) {
	a.hub.mu.Lock()
	if l := a.hub.lanes[sid]; l != nil && (l.held || l.draining) {
		l.waiting = append(l.waiting, serve)
		l.lastCancel = false
		a.hub.mu.Unlock()
		return
	}
	a.hub.mu.Unlock()
	serve()
}

// held says whether a lane holds the session's requests. Called by the
// ingress before it serves a request: no other goroutine can start holding
// a lane the ingress has not served a request to.
func (a *Agent) held(sid string) bool {
	a.hub.mu.Lock()
	defer a.hub.mu.Unlock()
	l := a.hub.lanes[sid]
	return l != nil && (l.held || l.draining)
}

// cancelInOrder is inOrder for a session/cancel: cancels in a row are one.
func (a *Agent) cancelInOrder(sid string, cancel func()) {
	a.hub.mu.Lock()
	if l := a.hub.lanes[sid]; l != nil && (l.held || l.draining) {
		if !l.lastCancel {
			l.waiting = append(l.waiting, cancel)
			l.lastCancel = true
		}
		a.hub.mu.Unlock()
		return
	}
	a.hub.mu.Unlock()
	cancel()
}

// hold makes the session's next requests wait until release: a serve
// function calls it before it starts work that must end before them.
func (a *Agent) hold(sid string) {
	a.hub.mu.Lock()
	l := a.hub.lanes[sid]
	if l == nil {
		l = &lane{}
		a.hub.lanes[sid] = l
	}
	l.held = true
	a.hub.mu.Unlock()
}

// release ends the work hold started, and serves the requests that waited,
// in order, until one of them holds the lane again.
func (a *Agent) release(sid string) {
	a.hub.mu.Lock()
	l := a.hub.lanes[sid]
	l.held = false
	if l.draining {
		// The request that held the lane is being served by a drain,
		// which goes on once it returns.
		a.hub.mu.Unlock()
		return
	}
	l.draining = true
	a.hub.mu.Unlock()
	for {
		a.hub.mu.Lock()
		if l.held || len(l.waiting) == 0 {
			l.draining = false
			if !l.held {
				delete(a.hub.lanes, sid)
			}
			a.hub.mu.Unlock()
			return
		}
		serve := l.waiting[0]
		l.waiting[0] = nil
		l.waiting = l.waiting[1:]
		if len(l.waiting) == 0 {
			l.lastCancel = false
		}
		a.hub.mu.Unlock()
		serve()
	}
}
