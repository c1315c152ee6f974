//! The fenced table: where the rows a lock protects live, and what to call them.

use crate::error::Result;
use crate::ident::{push_quoted, quote};

/// The column every helper reads and raises unless told otherwise.
pub const DEFAULT_FENCE_COLUMN: &str = "last_fence";
/// The row id column unless told otherwise.
pub const DEFAULT_ID_COLUMN: &str = "id";

/// A table whose rows carry a fence column, as the helpers address it: its name (and schema),
/// the id column that picks one row, the fence column, and the resource label that stale
/// refusals are counted and reported under.
///
/// Names are quoted when a statement is built (`"…"`, inner quotes doubled), so any name
/// works, and a name the crate refuses (empty, a NUL byte, over 63 bytes) is an
/// [`Error::Identifier`](crate::Error::Identifier) from the call that uses it.
///
/// ```
/// use fencedlock_guard::Table;
/// let invoices = Table::new("invoices").schema("billing").id_column("invoice_id");
/// assert_eq!(invoices.resource(), "billing.invoices");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    schema: Option<String>,
    name: String,
    id_column: String,
    fence_column: String,
    resource: Option<String>,
}

impl Table {
    /// The table `name`, with id column `id` and fence column `last_fence`.
    pub fn new(name: impl Into<String>) -> Table {
        Table {
            schema: None,
            name: name.into(),
            id_column: DEFAULT_ID_COLUMN.to_owned(),
            fence_column: DEFAULT_FENCE_COLUMN.to_owned(),
            resource: None,
        }
    }

    /// The table lives in `schema` (PostgreSQL; on SQLite, an attached database's name).
    pub fn schema(mut self, schema: impl Into<String>) -> Table {
        self.schema = Some(schema.into());
        self
    }

    /// The column that identifies one row (default `id`).
    pub fn id_column(mut self, column: impl Into<String>) -> Table {
        self.id_column = column.into();
        self
    }

    /// The fence column (default `last_fence`).
    pub fn fence_column(mut self, column: impl Into<String>) -> Table {
        self.fence_column = column.into();
        self
    }

    /// The label stale refusals are counted under (default: `schema.table`, or the table).
    /// Keep it to a handful of values per application: one time series each.
    pub fn resource_label(mut self, label: impl Into<String>) -> Table {
        self.resource = Some(label.into());
        self
    }

    /// The resource label: set with [`Table::resource_label`], else `schema.table` or `table`.
    pub fn resource(&self) -> String {
        match (&self.resource, &self.schema) {
            (Some(label), _) => label.clone(),
            (None, Some(schema)) => format!("{schema}.{}", self.name),
            (None, None) => self.name.clone(),
        }
    }

    /// The fence column's name, unquoted.
    pub fn fence_column_name(&self) -> &str {
        &self.fence_column
    }

    /// `schema.table` or `table`, unquoted: how errors name the table.
    pub(crate) fn qualified_name(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The table's name and schema, unquoted.
    #[cfg(feature = "sqlite")]
    pub(crate) fn name_and_schema(&self) -> (&str, Option<&str>) {
        (&self.name, self.schema.as_deref())
    }

    /// `"schema"."table"` or `"table"`, quoted as the helpers quote it: for statements of
    /// your own on the same table.
    pub fn quoted_name(&self) -> Result<String> {
        let mut out = String::new();
        self.push_quoted_name(&mut out)?;
        Ok(out)
    }

    pub(crate) fn push_quoted_name(&self, out: &mut String) -> Result<()> {
        if let Some(schema) = &self.schema {
            push_quoted(out, schema)?;
            out.push('.');
        }
        push_quoted(out, &self.name)
    }

    pub(crate) fn id_column_name(&self) -> &str {
        &self.id_column
    }

    pub(crate) fn quoted_id(&self) -> Result<String> {
        quote(&self.id_column)
    }

    pub(crate) fn quoted_fence(&self) -> Result<String> {
        quote(&self.fence_column)
    }
}
