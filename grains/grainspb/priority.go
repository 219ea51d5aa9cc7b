package grainspb

// GetPriority puts a client's cancel ahead of everything else in its
// session's mailbox (protoactor's priority mailbox, which the session's
// actor has): the deltas of the stream it cancels do not hold it. It is
// sent without a sender, so that it reaches the mailbox unwrapped.
func (*Cancel) GetPriority() int8 { return 7 }
