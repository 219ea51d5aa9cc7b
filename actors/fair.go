package actors

import "time"

// The order of the turns waiting for a slot (turns.go): a free slot goes
// to the owner (the session's token) served least lately among those with
// a turn waiting — an owner never served first, ties to the owner whose
// turn came first — and within an owner to its turn that came first. One
// tenant's queue of slow turns then keeps another's next turn waiting for
// one of them at most. With one owner (mm -acp) it is first come, first
// served. Choosing costs one step per owner with a turn waiting, not per
// turn.

// waiting is a turn in the queue, since when, and whether its session was
// told how long the queue is.
type waiting struct {
	acquireSlot
	since time.Time
	told  bool
	// arrived numbers the turns in the order they came.
	arrived uint64
}

// fairQueue holds the waiting turns, each owner's in the order they came.
// It is the serializer's, used from its Receive only.
type fairQueue struct {
	owners  map[string][]waiting
	n       int
	arrived uint64
	// served is, by owner, when a turn of theirs was last granted (a count
	// of grants); tick counts the grants.
	served map[string]uint64
	tick   uint64
}

// maxOwnersServed bounds what the queue remembers of owners it served:
// past it, once no turn waits, it forgets them all (only the order of
// owners with turns waiting matters).
const maxOwnersServed = 4096

func (q *fairQueue) len() int { return q.n }

func (q *fairQueue) push(w waiting) {
	if q.owners == nil {
		q.owners, q.served = map[string][]waiting{}, map[string]uint64{}
	}
	q.arrived++
	w.arrived = q.arrived
	q.owners[w.Owner] = append(q.owners[w.Owner], w)
	q.n++
}

// next is the owner whose turn goes next; "" and false when none waits.
func (q *fairQueue) next() (string, bool) {
	best, found := "", false
	for owner, turns := range q.owners {
		if !found || q.served[owner] < q.served[best] ||
			(q.served[owner] == q.served[best] && turns[0].arrived < q.owners[best][0].arrived) {
			best, found = owner, true
		}
	}
	return best, found
}

// pop takes the turn whose slot comes next off the queue.
func (q *fairQueue) pop() (waiting, bool) {
	owner, ok := q.next()
	if !ok {
		return waiting{}, false
	}
	turns := q.owners[owner]
	w := turns[0]
	turns[0] = waiting{}
	if len(turns) == 1 {
		delete(q.owners, owner)
	} else {
		q.owners[owner] = turns[1:]
	}
	q.n--
	q.tick++
	q.served[owner] = q.tick
	if q.n == 0 && len(q.served) > maxOwnersServed {
		clear(q.served)
	}
	return w, true
}

// remove takes turn off the queue (cancelled while it waited); it reports
// whether it was there.
func (q *fairQueue) remove(turn uint64) bool {
	for owner, turns := range q.owners {
		for i := range turns {
			if turns[i].Turn != turn {
				continue
			}
			turns = append(turns[:i], turns[i+1:]...)
			if len(turns) == 0 {
				delete(q.owners, owner)
			} else {
				q.owners[owner] = turns
			}
			q.n--
			return true
		}
	}
	return false
}

// each calls f on every waiting turn, until f says false.
func (q *fairQueue) each(f func(*waiting) bool) {
	for _, turns := range q.owners {
		for i := range turns {
			if !f(&turns[i]) {
				return
			}
		}
	}
}

// ahead says, for each waiting turn, how many waiting turns would be
// granted before it if no other came.
func (q *fairQueue) ahead() map[uint64]int {
	c := fairQueue{owners: make(map[string][]waiting, len(q.owners)), n: q.n, served: make(map[string]uint64, len(q.served)), tick: q.tick}
	for o, turns := range q.owners {
		c.owners[o] = append([]waiting(nil), turns...)
	}
	for o, v := range q.served {
		c.served[o] = v
	}
	out := make(map[uint64]int, q.n)
	for n := 0; ; n++ {
		w, ok := c.pop()
		if !ok {
			return out
		}
		out[w.Turn] = n
	}
}
