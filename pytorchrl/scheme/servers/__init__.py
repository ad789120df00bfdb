"""Named layouts (classic algorithms' and EXARL's workflows) as scheme configurations."""
