//! A checker's judgement: `Valid`, `Invalid` with the first violation found, or `Unknown`
//! when the history cannot show the property either way. Unknown is never a pass.

/// A checker's judgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Valid,
    Invalid(String),
    Unknown(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid(_) => "INVALID",
            Verdict::Unknown(_) => "unknown",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Verdict::Valid => "",
            Verdict::Invalid(d) | Verdict::Unknown(d) => d,
        }
    }
}
