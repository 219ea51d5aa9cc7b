// Package history is what a conversation is, as plain data and pure
// functions on it.
//
// A Message is one entry: the session actor (actors) keeps a slice of them,
// the session file or row (store) holds them as they are
// (docs/session-format.md), a load replays them, and each model call (llm)
// reads a window of them. Nothing here does I/O, keeps state or imports
// another package of mm's (only acp-go-sdk's types, for Replay and
// Flatten), so every
// function is tested by a table and any package may hold a history without
// depending on models or tools.
//
// The functions:
//   - Flatten, TooMuchText: a prompt's blocks as the user message's text,
//     what its other blocks add and its images; the bound on its size.
//     Mentions, HasMentions: the @paths of its text, for the session to
//     look up on disk (actors).
//   - Title: the title a session list shows.
//   - Chars, Estimate, TooLarge, Fit: the window cap, on the estimate's
//     sizes (four bytes a token, ImageTokens an image).
//   - Split, Compacted, Transcript: a compaction's plan (which turns are
//     summarised), its result, and the text the summariser reads.
//   - Replay, PlanUpdate: a history as session/load's notifications, a
//     plan as ACP's plan update; AnswerTo, the tool message answering a
//     call; RawArgs, a call's arguments as rawInput.
package history
