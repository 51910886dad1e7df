"""IR2Vec vocabularies for clang's ML inliner: the entities clang looks up (`entities`), the
vocabulary file and its flags (`vocab_file`), and a seed vocabulary learned from a corpus's
own IR (`module_ir` -> `ir_text` -> `triplets` -> `transe`, tied together by `learn`)."""
