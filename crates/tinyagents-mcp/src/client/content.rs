//! An MCP tool result as a `ToolResult`.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};
use tinyagents_core::ToolResult;

/// The result of a call: the text blocks joined by blank lines, in order,
/// for the model; an image, audio or binary resource as a one-line
/// reference (`[image 1: image/png, 1.2 KiB]`), its data kept out of the
/// model's context in the result's host-only metadata, with the structured
/// content; `isError` as an error result. A result with structured content
/// and no text gives the model the structured content's JSON.
pub(crate) fn tool_result(server: &str, tool: &str, result: CallToolResult) -> ToolResult {
    let mut parts = Vec::with_capacity(result.content.len());
    let mut attachments = Vec::new();
    for block in result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text),
            ContentBlock::Image(image) => {
                parts.push(reference(
                    "image",
                    attachments.len(),
                    &image.mime_type,
                    &image.data,
                ));
                attachments.push(
                    json!({"kind": "image", "mime_type": image.mime_type, "data": image.data}),
                );
            }
            ContentBlock::Audio(audio) => {
                parts.push(reference(
                    "audio",
                    attachments.len(),
                    &audio.mime_type,
                    &audio.data,
                ));
                attachments.push(
                    json!({"kind": "audio", "mime_type": audio.mime_type, "data": audio.data}),
                );
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    parts.push(format!("[resource {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.unwrap_or_else(|| "application/octet-stream".to_owned());
                    parts.push(format!(
                        "{} at {uri}",
                        reference("resource", attachments.len(), &mime, &blob)
                    ));
                    attachments.push(
                        json!({"kind": "resource", "uri": uri, "mime_type": mime, "data": blob}),
                    );
                }
                _ => parts.push("[resource of an unknown kind]".to_owned()),
            },
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[resource link: {} ({})]", link.uri, link.name));
            }
            // A block of a later protocol revision: named, not dropped
            // silently.
            other => {
                let kind = serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "unknown".to_owned());
                parts.push(format!("[{kind} content]"));
            }
        }
    }
    let mut content = parts.join("\n\n");
    if content.is_empty()
        && let Some(structured) = &result.structured_content
    {
        content = structured.to_string();
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert("mcp_server".to_owned(), Value::from(server));
    metadata.insert("mcp_tool".to_owned(), Value::from(tool));
    if let Some(structured) = result.structured_content {
        metadata.insert("structured_content".to_owned(), structured);
    }
    if let Some(meta) = result.meta {
        metadata.insert("mcp_meta".to_owned(), Value::Object(meta.0));
    }
    if !attachments.is_empty() {
        metadata.insert("attachments".to_owned(), Value::Array(attachments));
    }
    let result = if result.is_error == Some(true) {
        ToolResult::error(content)
    } else {
        ToolResult::text(content)
    };
    result.with_metadata(Value::Object(metadata))
}

/// `[image 1: image/png, 1.2 KiB]`, from the base64 length.
fn reference(kind: &str, index: usize, mime: &str, base64: &str) -> String {
    let bytes = base64.len() / 4 * 3;
    let size = if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    };
    format!("[{kind} {}: {mime}, {size}]", index + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn text_images_and_errors_map() {
        let mapped = tool_result(
            "s",
            "t",
            result(json!({"content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "text", "text": "two"}
            ]})),
        );
        assert!(!mapped.is_error);
        assert_eq!(
            mapped.content,
            "one\n\n[image 1: image/png, 3 bytes]\n\ntwo"
        );
        let metadata = mapped.metadata.unwrap_or_default();
        assert_eq!(metadata["attachments"][0]["data"], "AAAA");
        assert_eq!(metadata["mcp_tool"], "t");

        let failed = tool_result(
            "s",
            "t",
            result(json!({"content": [{"type": "text", "text": "no"}], "isError": true})),
        );
        assert!(failed.is_error);
        assert_eq!(failed.content, "no");
    }

    #[test]
    fn structured_content_without_text_is_the_content() {
        let mapped = tool_result(
            "s",
            "t",
            result(json!({"content": [], "structuredContent": {"sum": 3}})),
        );
        assert_eq!(mapped.content, r#"{"sum":3}"#);
        assert_eq!(
            mapped.metadata.unwrap_or_default()["structured_content"]["sum"],
            3
        );
    }
}
