//! The condition a wait matches against a task's output, as the output is written (`bash_output`
//! with `until`). The registry knows nothing of regular expressions or streams: a condition makes
//! one [`OutputScan`] per stream, and the producer feeds each scan its stream's unread text in the
//! order it was written, from the previous read on, however much of it has left memory since
//! (`TaskProducer::output_matches`). A scan keeps only its own state, never the text, so matching
//! a flood costs no memory, and no write can slip past it between two looks.

/// A condition on the output produced since the previous read, matched stream by stream.
pub trait OutputCondition: Send + Sync + 'static {
    /// A new scan of one stream's text, from its first byte.
    fn scan(&self) -> Box<dyn OutputScan>;
}

/// One stream's text, fed in the order it was written.
pub trait OutputScan: Send + 'static {
    /// Feeds the next bytes of the text; `true` once the condition holds on the text fed so far, as
    /// it stands at the end of these bytes (a condition on the end of the text, such as `$`, is
    /// judged there). An empty `bytes` asks about the text as it stands. Not called after `true`.
    fn feed(&mut self, bytes: &[u8]) -> bool;

    /// Bytes between the last fed and the next are lost (they left memory and no spill file has
    /// them): what follows is matched as a new text.
    fn gap(&mut self);
}
