//! How a rejected config is reported: every problem at once, each prefixed
//! by the YAML path of the offending key (docs/config.md, configuration
//! errors).

/// Every problem found, each prefixed by its YAML path.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "invalid configuration ({} error{}):",
            self.0.len(),
            if self.0.len() == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
