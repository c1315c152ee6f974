//! The `INFO fencedlock` section as Redis's info API writes it: flat fields and dict fields.

use redis_module::{raw, InfoContext};

/// The module's section of an `INFO` reply, being written.
pub struct Section<'a> {
    ctx: &'a InfoContext,
}

impl<'a> Section<'a> {
    /// The flat (deprecated) info API is the one that names the section after the module, so
    /// `INFO fencedlock` selects it and fields come out as `fencedlock_<name>`.
    #[allow(deprecated)]
    pub fn begin(ctx: &'a InfoContext) -> Self {
        ctx.add_info_section(None);
        Self { ctx }
    }

    #[allow(deprecated)]
    pub fn field(&self, name: &str, value: i64) {
        self.ctx.add_info_field_long_long(name, value);
    }

    /// One dict field, `fencedlock_<name>:k=v,...`, whose entries `entries` writes with
    /// [`Section::field`]. A server without dict fields shows nothing for it.
    pub fn dict(&self, name: &str, entries: impl FnOnce(&Self)) {
        // SAFETY: copies function pointers Redis filled at module load.
        let dicts = unsafe { (raw::RedisModule_InfoBeginDictField, raw::RedisModule_InfoEndDictField) };
        if !matches!(dicts, (Some(_), Some(_))) {
            return;
        }
        raw::add_info_begin_dict_field(self.ctx.ctx, name);
        entries(self);
        raw::add_info_end_dict_field(self.ctx.ctx);
    }
}
